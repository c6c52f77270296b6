"""The one ledger implementation, over a ``Dialect`` (SQLite or PostgreSQL).

Every write runs in a transaction that first takes the ledger's single write lock
(SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: ``SELECT … FROM chain_head FOR UPDATE``).
One lock is enough at scheduling rates (a bind is a few small statements) and it buys
two invariants at once: the "one active allocation per pod" check cannot race, and
events get gap-free sequence numbers in a single hash chain. The partial unique index
on (pod_uid, gpu_uuid) over active rows backs the check up inside the database. The
same lock makes the capacity check (``capacity``: a GPU's grants never exceed its
memory) exact across replicas: the sum it reads cannot change before the decision
commits.

The scheduling path's writes (a decision, a status change) go through ``group.py``:
writes that queue while a transaction runs share the next one, so concurrent binds pay
for one lock, one chain-head update and one commit together.

This class is the transaction boundary, timing and logging; what each table holds and
how it is written lives beside its SQL (``allocations``, ``nodes``, ``discrepancies``,
``trail``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import Any, TypeVar

from extender.core.allocation import (
    Allocation,
    AlreadyAllocated,
    Decision,
    EventKind,
    NodeRef,
    Observation,
    Status,
)
from extender.core.received import Held, Receipt
from extender.ledger import acks, allocations, discrepancies, nodes, receipts, trail
from extender.ledger.chain import verify
from extender.ledger.dialect import Cursor, Dialect, Hooks, NullHooks, UniqueConflict
from extender.ledger.discrepancies import DISCREPANCY_GAP_S
from extender.ledger.group import RIDE_GRACE_S, GroupCommit
from extender.ledger.migrate import migrate
from extender.ledger.named import Shape, fetch_all, stream
from extender.ledger.records import (
    AllocationFilter,
    ChainReport,
    DiscrepancyRecord,
    EventRecord,
    NodePeriod,
    NodeRecord,
)
from extender.ledger.replay import Replay, check_allocations, check_periods
from extender.ledger.rollup import MAX_GAP_S
from extender.ledger.trail import Tx

__all__ = ["Cursor", "Dialect", "Hooks", "NullHooks", "SqlLedger", "UniqueConflict"]

log = logging.getLogger("headroom.ledger")
T = TypeVar("T")


class SqlLedger:
    """The ledger over a dialect. Thread-safe: the dialect gives each thread its connection."""

    def __init__(
        self,
        dialect: Dialect,
        hooks: Hooks | None = None,
        max_gap_s: float = MAX_GAP_S,
        discrepancy_gap_s: float = DISCREPANCY_GAP_S,
        ride_s: float = RIDE_GRACE_S,
    ) -> None:
        self.dialect = dialect
        self.hooks: Hooks = hooks or NullHooks()
        self.max_gap_s = max_gap_s
        self.discrepancy_gap_s = discrepancy_gap_s
        # the scheduling path's writes (decisions, status changes) share transactions
        self._group = GroupCommit(lambda ops: self._write(*ops), grace=ride_s)
        migrate(dialect)

    # ---- plumbing -------------------------------------------------------------------
    @contextmanager
    def _write(self, *ops: str) -> Iterator[Tx]:
        """One write transaction, timed for each write it carries (``ops``)."""
        t0 = time.perf_counter()
        with self.dialect.write() as conn:
            tx = Tx(conn, self.dialect)
            yield tx
            tx.flush_head()
        seconds = time.perf_counter() - t0
        for op in ops:
            self.hooks.write_seconds(op, seconds)

    def _read(self, shape: Shape[T], statement: str, params: Sequence[Any] = ()) -> list[T]:
        with self.dialect.read() as conn:
            return fetch_all(conn.execute(self.dialect.sql(statement), tuple(params)), shape)

    def close(self) -> None:
        self._group.close()  # the riders still waiting are committed first
        self.dialect.close()

    # ---- lifecycle writes -----------------------------------------------------------
    def record_decision(self, decision: Decision) -> list[Allocation]:
        pod, node = decision.pod, decision.node
        try:
            ids = self._group.run("record_decision", lambda tx: allocations.decide(tx, decision))
        except UniqueConflict:
            raise AlreadyAllocated(pod.uid, node.name) from None
        log.info(
            "decision recorded",
            extra={
                "event": "ledger.decision",
                "pod_uid": pod.uid,
                "node": node.name,
                "allocations": ids,
            },
        )
        return [
            Allocation(
                id=i,
                pod=pod,
                node=node,
                grant=g,
                status=Status.RESERVED,
                decided_at=decision.decided_at,
                policy=decision.policy,
            )
            for i, g in zip(ids, decision.grants, strict=True)
        ]

    def _transition(
        self,
        op: str,
        statement: str,
        params: Sequence[Any],
        kind: EventKind,
        at: float,
        pod_uid: str,
        extra: dict[str, Any],
    ) -> int:
        """One status change, one event per pod it touched; returns the rows moved."""
        changed = self._group.run(
            op, lambda tx: allocations.transition(tx, statement, params, kind, at, extra)
        )
        if changed:
            # a bound status is the decision line's expected sequel: at INFO it would
            # double the log lines per pod (a DRA claim's, recorded bound at once; a
            # bind's own rides in a later transaction, group.py, and logs nothing)
            log.log(
                logging.DEBUG if kind == EventKind.BOUND else logging.INFO,
                "allocation %s",
                kind.value,
                extra={"event": f"ledger.{kind.value}", "pod_uid": pod_uid, "rows": changed},
            )
        return changed

    def mark_bound(self, pod_uid: str, at: float) -> None:
        self._transition(
            "mark_bound", allocations.MARK_BOUND, (at, pod_uid), EventKind.BOUND, at, pod_uid, {}
        )

    def mark_bound_later(self, pod_uid: str, at: float) -> None:
        statement, params = allocations.MARK_BOUND, (at, pod_uid)
        self._group.later(
            "mark_bound",
            lambda tx: allocations.transition(tx, statement, params, EventKind.BOUND, at, {}),
            pod_uid,
        )

    def flush(self) -> None:
        self._group.flush()

    def fail_bind(self, pod_uid: str, at: float, error: str) -> None:
        self._transition(
            "fail_bind",
            allocations.FAIL_BIND,
            (at, error, pod_uid),
            EventKind.BIND_FAILED,
            at,
            pod_uid,
            {"error": error},
        )

    def mark_started(self, pod_uid: str, at: float) -> None:
        statement, params = allocations.MARK_STARTED, (at, at, pod_uid)
        self._transition("mark_started", statement, params, EventKind.STARTED, at, pod_uid, {})

    def release(self, pod_uid: str, at: float, reason: str) -> int:
        return self._transition(
            "release",
            allocations.RELEASE_POD,
            (at, reason, pod_uid),
            EventKind.RELEASED,
            at,
            pod_uid,
            {"reason": reason},
        )

    def release_node(self, node: str, at: float, reason: str) -> int:
        return self._transition(
            "release_node",
            allocations.RELEASE_NODE,
            (at, reason, node),
            EventKind.RELEASED,
            at,
            "",
            {"reason": reason},
        )

    # ---- usage and findings ---------------------------------------------------------
    def observe(self, observations: Sequence[Observation], at: float) -> None:
        if not observations:
            return
        with self._write("observe") as tx:
            allocations.fold_samples(tx, observations, at, self.max_gap_s)
        self.hooks.observed(observations)

    def record_discrepancy(
        self,
        kind: EventKind,
        node: str,
        gpu_uuid: str,
        pod_uid: str,
        amount_mib: int,
        detail: str,
        at: float,
    ) -> None:
        with self._write("record_discrepancy") as tx:
            opened = discrepancies.record(
                tx, kind, node, gpu_uuid, pod_uid, amount_mib, detail, at, self.discrepancy_gap_s
            )
        if not opened:
            return
        self.hooks.discrepancy_opened(kind.value)
        log.warning(
            "discrepancy opened",
            extra={
                "event": f"ledger.{kind.value}",
                "node": node,
                "gpu_uuid": gpu_uuid,
                "pod_uid": pod_uid,
                "amount_mib": amount_mib,
            },
        )

    def record_received(self, held: Held, at: float) -> list[Receipt]:
        with self._write("record_received") as tx:
            changed = receipts.record(tx, held, at)
        for r in changed:
            moved = {"allocation": r.allocation_id, "granted": r.granted_gpu, "got": r.gpu_uuid}
            extra = {"event": "ledger.received", "pod_uid": held.pod_uid, **moved}
            log.info("receipt recorded", extra=extra)
        return changed

    def record_ack(
        self,
        pod_uid: str,
        pod: str,
        node: str,
        slots: Sequence[str],
        gpu_uuids: Sequence[str],
        waited_s: float,
        at: float,
    ) -> None:
        with self._write("record_ack") as tx:
            acks.record_ack(tx, pod_uid, pod, node, slots, gpu_uuids, waited_s, at)
        log.info(
            "grant acknowledged by the device plugin",
            extra={"event": "ledger.acknowledged", "pod_uid": pod_uid, "node": node},
        )

    # ---- nodes ----------------------------------------------------------------------
    def record_node(
        self,
        node: NodeRef,
        gpus: Sequence[tuple[str, str, int]],
        gpu_price_per_hour: Decimal | None,
        at: float,
    ) -> None:
        """Upsert a node; open a new price period when its price, GPUs or kind change."""
        with self._write("record_node") as tx:
            nodes.upsert(tx, node, gpus, gpu_price_per_hour, at)

    def node_gone(self, name: str, at: float, reason: str) -> None:
        """Mark a node gone and close its price period (its allocations: ``release_node``)."""
        with self._write("node_gone") as tx:
            nodes.gone(tx, name, at, reason)

    # ---- reads ----------------------------------------------------------------------
    def ping(self) -> None:
        with self.dialect.read() as conn:
            conn.execute("SELECT 1").fetchone()

    def active(self) -> list[Allocation]:
        return self._read(allocations.ALLOCATION, allocations.SELECT_ACTIVE)

    def for_pod(self, pod_uid: str) -> list[Allocation]:
        return self._read(allocations.ALLOCATION, allocations.SELECT_FOR_POD, (pod_uid,))

    def get_allocation(self, allocation_id: int) -> Allocation | None:
        found = self._read(allocations.ALLOCATION, allocations.SELECT_ONE, (allocation_id,))
        return found[0] if found else None

    def list_allocations(
        self, flt: AllocationFilter, after_id: int = 0, limit: int = 100
    ) -> list[Allocation]:
        where, params = allocations.where(flt, after_id)
        q = f"{allocations.SELECT} WHERE {where} ORDER BY id LIMIT ?"
        return self._read(allocations.ALLOCATION, q, (*params, limit))

    def charge_rows(self, start: float, end: float) -> Iterator[Allocation]:
        """Non-failed rows overlapping ``[start, end)``, streamed in batches."""
        with self.dialect.read() as conn:
            cur = conn.execute(self.dialect.sql(allocations.CHARGEABLE), (end, start))
            yield from stream(cur, allocations.ALLOCATION, 10_000)

    def receipts(self, start: float, end: float) -> list[Receipt]:
        return self._read(receipts.RECEIPT, receipts.IN_WINDOW, (end, start))

    def receipts_for(self, allocation_ids: Sequence[int]) -> list[Receipt]:
        q, params = receipts.for_ids(allocation_ids)
        return self._read(receipts.RECEIPT, q, params)

    def node_periods(self, start: float, end: float) -> list[NodePeriod]:
        return self._read(nodes.PERIOD, nodes.PERIODS_IN_WINDOW, (end, start))

    def nodes(self) -> list[NodeRecord]:
        return self._read(nodes.NODE, nodes.SELECT_NODES)

    def list_events(self, after_seq: int = 0, limit: int = 100) -> list[EventRecord]:
        return self._read(trail.EVENT, trail.SELECT_EVENTS, (after_seq, limit))

    def list_discrepancies(
        self, open_only: bool, at: float, after_id: int = 0, limit: int = 100
    ) -> list[DiscrepancyRecord]:
        """Findings by id; "open" = not closed and seen within the persistence gap."""
        q, params = discrepancies.listing(open_only, at, self.discrepancy_gap_s, after_id)
        return self._read(discrepancies.DISCREPANCY, q, (*params, limit))

    def verify_chain(self) -> ChainReport:
        """Walk the whole event chain, then hold every billed row against what the chain
        says it must be (``replay.py``), in one read transaction (consistent snapshot)."""
        with self.dialect.read() as conn:
            head = trail.read_head(conn, self.dialect)
            rep, got = Replay(), receipts.ReceiptReplay()
            events = _fed(trail.all_events(conn, self.dialect), rep, got)
            report = verify(events, head.seq, head.hash)
            if not report.ok:
                return report
            sql = self.dialect.sql
            rows = stream(conn.execute(sql(allocations.ALL_ROWS)), allocations.ALLOCATION, 10_000)
            bad = check_allocations(rep, rows, lambda seq: trail.event_at(conn, self.dialect, seq))
            if bad is None:
                bad = check_periods(rep, conn.execute(sql(nodes.ALL_PERIODS)).fetchall())
            if bad is None:
                bad = receipts.check(
                    got, fetch_all(conn.execute(sql(receipts.ALL)), receipts.RECEIPT)
                )
            if bad is not None:
                return ChainReport(False, report.events, None, bad[1])
            return report

    def bulk_insert(self, params: Sequence[Sequence[Any]]) -> None:
        """Benchmark/import helper: raw ``INSERT_ALLOCATION_BULK`` rows, no events."""
        with self._write("bulk_insert") as tx:
            tx.conn.cursor().executemany(
                self.dialect.sql(allocations.INSERT_ALLOCATION_BULK), params
            )


def _fed(
    events: Iterator[EventRecord], replay: Replay, got: receipts.ReceiptReplay
) -> Iterator[EventRecord]:
    """The events, each also fed to the replays as the chain walk reads it."""
    for e in events:
        replay.feed(e)
        got.feed(e)
        yield e
