"""The one ledger implementation, over a ``Dialect`` (SQLite or PostgreSQL).

Every write runs in a transaction that first takes the ledger's single write lock
(SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: ``SELECT … FROM chain_head FOR UPDATE``).
One lock is enough at scheduling rates (a bind is a few small statements) and it buys
two invariants at once: the "one active allocation per pod" check cannot race, and
events get gap-free sequence numbers in a single hash chain. The partial unique index
on (pod_uid, gpu_uuid) over active rows backs the check up inside the database.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from decimal import Decimal
from typing import Any, Protocol

from extender.core.allocation import (
    Allocation,
    AlreadyAllocated,
    Decision,
    EventKind,
    NodeRef,
    Observation,
    Status,
)
from extender.ledger import rows
from extender.ledger.chain import GENESIS, canonical_payload, event_hash, verify
from extender.ledger.chargeback import ChargeRow
from extender.ledger.records import (
    AllocationFilter,
    ChainReport,
    DiscrepancyRecord,
    EventRecord,
    NodePeriod,
    NodeRecord,
)
from extender.ledger.rollup import MAX_GAP_S, fold
from extender.ledger.schema import MIGRATIONS, MIGRATIONS_TABLE, render

log = logging.getLogger("headroom.ledger")

DISCREPANCY_KINDS = (EventKind.OVERRUN, EventKind.LEAK, EventKind.UNACCOUNTED)
DISCREPANCY_GAP_S = 300.0  # unseen this long: the finding is over; a new one opens next time


class UniqueConflict(Exception):
    """A unique index refused a row (translated by the dialect from the driver's error)."""


class Cursor(Protocol):
    rowcount: int

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def fetchmany(self, size: int = ...) -> list[Any]: ...


class Dialect(Protocol):
    """What differs between SQLite and PostgreSQL; everything else is shared."""

    name: str
    types: dict[str, str]

    def write(self) -> AbstractContextManager[Any]:
        """A connection inside a write transaction holding the ledger write lock."""
        ...

    def read(self) -> AbstractContextManager[Any]:
        """A connection for reads (errors translated to ``LedgerUnavailable``)."""
        ...

    def migrate(self) -> AbstractContextManager[Any]:
        """A write transaction serialised against other processes migrating."""
        ...

    def sql(self, statement: str) -> str: ...

    def money(self, value: Decimal) -> Any: ...

    def close(self) -> None: ...


class Hooks(Protocol):
    """Side channels for metrics; called after a successful commit."""

    def write_seconds(self, op: str, seconds: float) -> None: ...
    def discrepancy_opened(self, kind: str) -> None: ...
    def observed(self, observations: Sequence[Observation]) -> None: ...


class NullHooks:
    def write_seconds(self, op: str, seconds: float) -> None:
        pass

    def discrepancy_opened(self, kind: str) -> None:
        pass

    def observed(self, observations: Sequence[Observation]) -> None:
        pass


class _Tx:
    """One write transaction: statements, and events appended to the hash chain."""

    def __init__(self, conn: Any, dialect: Dialect) -> None:
        self.conn, self.dialect = conn, dialect
        self._head: tuple[int, str] | None = None

    def execute(self, statement: str, params: Sequence[Any] = ()) -> Cursor:
        cur: Cursor = self.conn.execute(self.dialect.sql(statement), tuple(params))
        return cur

    def append_event(
        self,
        at: float,
        kind: EventKind,
        payload: dict[str, Any],
        pod_uid: str = "",
        node: str = "",
        gpu_uuid: str = "",
    ) -> int:
        if self._head is None:
            seq, h = self.execute(rows.HEAD).fetchone()
            self._head = (int(seq), str(h))
        seq, prev = self._head[0] + 1, self._head[1]
        body = canonical_payload(payload)
        digest = event_hash(prev, seq, at, kind.value, pod_uid, node, gpu_uuid, body)
        self.execute(
            rows.INSERT_EVENT, (seq, at, kind.value, pod_uid, node, gpu_uuid, body, prev, digest)
        )
        self._head = (seq, digest)
        return seq

    def flush_head(self) -> None:
        if self._head is not None:
            self.execute(rows.SET_HEAD, self._head)


class SqlLedger:
    """The ledger over a dialect. Thread-safe: the dialect gives each thread its connection."""

    def __init__(
        self,
        dialect: Dialect,
        hooks: Hooks | None = None,
        max_gap_s: float = MAX_GAP_S,
        discrepancy_gap_s: float = DISCREPANCY_GAP_S,
    ) -> None:
        self.dialect = dialect
        self.hooks: Hooks = hooks or NullHooks()
        self.max_gap_s = max_gap_s
        self.discrepancy_gap_s = discrepancy_gap_s
        self._migrate()

    # ---- plumbing -------------------------------------------------------------------
    @contextmanager
    def _write(self, op: str) -> Iterator[_Tx]:
        t0 = time.perf_counter()
        with self.dialect.write() as conn:
            tx = _Tx(conn, self.dialect)
            yield tx
            tx.flush_head()
        self.hooks.write_seconds(op, time.perf_counter() - t0)

    def _query(self, statement: str, params: Sequence[Any] = ()) -> list[Any]:
        with self.dialect.read() as conn:
            rows_: list[Any] = conn.execute(self.dialect.sql(statement), tuple(params)).fetchall()
            return rows_

    def _migrate(self) -> None:
        types = self.dialect.types
        with self.dialect.migrate() as conn:
            tx = _Tx(conn, self.dialect)
            tx.execute(render(MIGRATIONS_TABLE, types))
            done = {
                int(r[0]) for r in tx.execute("SELECT version FROM schema_migrations").fetchall()
            }
            for m in MIGRATIONS:
                if m.version in done:
                    continue
                for statement in m.statements:
                    tx.execute(render(statement, types))
                if m.version == 1:
                    tx.execute(rows.INSERT_HEAD, (GENESIS,))
                tx.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (m.version, m.name, time.time()),
                )
                log.info(
                    "ledger schema migrated",
                    extra={
                        "event": "ledger.migrated",
                        "version": m.version,
                        "dialect": self.dialect.name,
                    },
                )

    def close(self) -> None:
        self.dialect.close()

    # ---- lifecycle writes -----------------------------------------------------------
    def record_decision(self, decision: Decision) -> list[Allocation]:
        pod, node = decision.pod, decision.node
        try:
            with self._write("record_decision") as tx:
                held = tx.execute(rows.ACTIVE_FOR_POD, (pod.uid,)).fetchone()
                if held is not None:
                    raise AlreadyAllocated(pod.uid, str(held[0]))
                ids = [self._insert_grant(tx, decision, i) for i in range(len(decision.grants))]
                tx.append_event(
                    decision.decided_at,
                    EventKind.DECISION,
                    _decision_payload(decision, ids),
                    pod.uid,
                    node.name,
                    ",".join(g.gpu_uuid for g in decision.grants),
                )
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

    def _insert_grant(self, tx: _Tx, d: Decision, i: int) -> int:
        g, p, n = d.grants[i], d.pod, d.node
        row = tx.execute(
            rows.INSERT_ALLOCATION,
            (
                p.uid,
                p.namespace,
                p.name,
                p.owner_kind,
                p.owner_name,
                rows.labels_json(p.labels),
                n.name,
                n.instance_type,
                n.capacity_type,
                n.zone,
                n.nodepool,
                g.gpu_uuid,
                g.gpu_index,
                g.model,
                g.memory_mib,
                g.gpu_total_mib,
                g.sharing.value,
                g.mig_profile,
                g.claim,
                g.dra_device,
                self.dialect.money(g.price_per_hour),
                d.policy,
                Status.RESERVED.value,
                d.decided_at,
            ),
        ).fetchone()
        return int(row[0])

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
        """Run one status UPDATE … RETURNING and log one event per pod it touched."""
        with self._write(op) as tx:
            changed = tx.execute(statement, params).fetchall()
            by_pod: dict[tuple[str, str], list[int]] = {}
            for r in changed:
                key = (str(r[1]) if len(r) > 2 else pod_uid, str(r[-1]))
                by_pod.setdefault(key, []).append(int(r[0]))
            for (uid, node), ids in sorted(by_pod.items()):
                tx.append_event(at, kind, {"allocation_ids": sorted(ids), **extra}, uid, node)
        if changed:
            log.info(
                "allocation %s",
                kind.value,
                extra={"event": f"ledger.{kind.value}", "pod_uid": pod_uid, "rows": len(changed)},
            )
        return len(changed)

    def mark_bound(self, pod_uid: str, at: float) -> None:
        self._transition(
            "mark_bound", rows.MARK_BOUND, (at, pod_uid), EventKind.BOUND, at, pod_uid, {}
        )

    def fail_bind(self, pod_uid: str, at: float, error: str) -> None:
        self._transition(
            "fail_bind",
            rows.FAIL_BIND,
            (at, error, pod_uid),
            EventKind.BIND_FAILED,
            at,
            pod_uid,
            {"error": error},
        )

    def mark_started(self, pod_uid: str, at: float) -> None:
        self._transition(
            "mark_started", rows.MARK_STARTED, (at, at, pod_uid), EventKind.STARTED, at, pod_uid, {}
        )

    def release(self, pod_uid: str, at: float, reason: str) -> int:
        return self._transition(
            "release",
            rows.RELEASE_POD,
            (at, reason, pod_uid),
            EventKind.RELEASED,
            at,
            pod_uid,
            {"reason": reason},
        )

    def release_node(self, node: str, at: float, reason: str) -> int:
        return self._transition(
            "release_node",
            rows.RELEASE_NODE,
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
            for o in observations:
                for r in tx.execute(rows.SELECT_ROLLUP, (o.pod_uid, o.gpu_uuid)).fetchall():
                    new = fold(
                        rows.rollup_from_row(r),
                        o.used_mib,
                        o.sm_util,
                        at,
                        float(r[9]),
                        self.max_gap_s,
                    )
                    tx.execute(
                        rows.UPDATE_ROLLUP,
                        (
                            new.count,
                            new.peak_mib,
                            new.mean_mib,
                            new.weight_s,
                            new.mean_sm,
                            new.sm_weight_s,
                            new.last_at,
                            new.last_mib,
                            int(r[0]),
                        ),
                    )
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
        if kind not in DISCREPANCY_KINDS:
            raise ValueError(f"not a discrepancy kind: {kind!r}")
        with self._write("record_discrepancy") as tx:
            key = (kind.value, node, gpu_uuid, pod_uid)
            found = tx.execute(rows.OPEN_DISCREPANCY, key).fetchone()
            if found is not None and at - float(found[1]) <= self.discrepancy_gap_s:
                tx.execute(
                    rows.BUMP_DISCREPANCY,
                    (
                        max(at, float(found[1])),
                        amount_mib,
                        amount_mib,
                        amount_mib,
                        detail,
                        int(found[0]),
                    ),
                )
                return
            if found is not None:
                tx.execute(rows.CLOSE_DISCREPANCY, (int(found[0]),))
            new_id = int(
                tx.execute(
                    rows.INSERT_DISCREPANCY, (*key, at, at, amount_mib, amount_mib, detail)
                ).fetchone()[0]
            )
            tx.append_event(
                at,
                kind,
                {"discrepancy_id": new_id, "amount_mib": amount_mib, "detail": detail},
                pod_uid,
                node,
                gpu_uuid,
            )
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

    # ---- nodes ----------------------------------------------------------------------
    def record_node(
        self,
        node: NodeRef,
        gpus: Sequence[tuple[str, str, int]],
        gpu_price_per_hour: Decimal,
        at: float,
    ) -> None:
        """Upsert a node; open a new price period when its price, GPUs or kind change."""
        count, total = len(gpus), sum(int(g[2]) for g in gpus)
        gpus_json = _gpus_json(gpus)
        price = self.dialect.money(gpu_price_per_hour)
        with self._write("record_node") as tx:
            cur = tx.execute(rows.SELECT_NODE, (node.name,)).fetchone()
            if cur is None:
                tx.execute(
                    rows.INSERT_NODE,
                    (
                        node.name,
                        node.instance_type,
                        node.capacity_type,
                        node.zone,
                        node.nodepool,
                        count,
                        total,
                        gpus_json,
                        price,
                        at,
                        at,
                    ),
                )
                changed = True
            else:
                old = rows.node_from_row(cur)
                changed = (
                    old.gone_at is not None
                    or old.gpu_count != count
                    or old.gpu_total_mib != total
                    or old.gpu_price_per_hour != gpu_price_per_hour
                    or old.capacity_type != node.capacity_type
                    or old.instance_type != node.instance_type
                )
                tx.execute(
                    rows.UPDATE_NODE,
                    (
                        node.instance_type,
                        node.capacity_type,
                        node.zone,
                        node.nodepool,
                        count,
                        total,
                        gpus_json,
                        price,
                        max(at, old.last_seen),
                        node.name,
                    ),
                )
            if changed:
                tx.execute(rows.CLOSE_PERIOD, (at, node.name))
                tx.execute(
                    rows.OPEN_PERIOD,
                    (node.name, node.instance_type, node.capacity_type, count, total, price, at),
                )

    def node_gone(self, name: str, at: float, reason: str) -> None:
        """Mark a node gone and close its price period (its allocations: ``release_node``)."""
        with self._write("node_gone") as tx:
            tx.execute(rows.NODE_GONE, (at, reason, at, name))
            tx.execute(rows.CLOSE_PERIOD, (at, name))

    # ---- reads ----------------------------------------------------------------------
    def ping(self) -> None:
        with self.dialect.read() as conn:
            conn.execute("SELECT 1").fetchone()

    def active(self) -> list[Allocation]:
        return [rows.allocation_from_row(r) for r in self._query(rows.SELECT_ACTIVE)]

    def for_pod(self, pod_uid: str) -> list[Allocation]:
        return [rows.allocation_from_row(r) for r in self._query(rows.SELECT_FOR_POD, (pod_uid,))]

    def get_allocation(self, allocation_id: int) -> Allocation | None:
        found = self._query(rows.SELECT_ONE, (allocation_id,))
        return rows.allocation_from_row(found[0]) if found else None

    def list_allocations(
        self, flt: AllocationFilter, after_id: int = 0, limit: int = 100
    ) -> list[Allocation]:
        where, params = rows.allocation_where(flt, after_id)
        q = f"SELECT {rows.ALLOC_COLS} FROM allocations WHERE {where} ORDER BY id LIMIT ?"
        return [rows.allocation_from_row(r) for r in self._query(q, (*params, limit))]

    def charge_rows(self, start: float, end: float) -> Iterator[ChargeRow]:
        """Non-failed rows overlapping ``[start, end)``, streamed in batches."""
        with self.dialect.read() as conn:
            cur = conn.execute(self.dialect.sql(rows.CHARGE_ROWS), (end, start))
            while batch := cur.fetchmany(10_000):
                yield from map(rows.charge_row, batch)

    def node_periods(self, start: float, end: float) -> list[NodePeriod]:
        return [rows.period_from_row(r) for r in self._query(rows.PERIODS_IN_WINDOW, (end, start))]

    def nodes(self) -> list[NodeRecord]:
        return [rows.node_from_row(r) for r in self._query(rows.SELECT_NODES)]

    def list_events(self, after_seq: int = 0, limit: int = 100) -> list[EventRecord]:
        return [rows.event_from_row(r) for r in self._query(rows.SELECT_EVENTS, (after_seq, limit))]

    def list_discrepancies(
        self, open_only: bool, at: float, after_id: int = 0, limit: int = 100
    ) -> list[DiscrepancyRecord]:
        """Findings by id; "open" = not closed and seen within the persistence gap."""
        q = f"SELECT {rows.DISC_COLS} FROM discrepancies WHERE id > ?"
        params: list[Any] = [after_id]
        if open_only:
            q += " AND closed_at IS NULL AND last_seen >= ?"
            params.append(at - self.discrepancy_gap_s)
        q += " ORDER BY id LIMIT ?"
        return [rows.discrepancy_from_row(r) for r in self._query(q, (*params, limit))]

    def verify_chain(self) -> ChainReport:
        """Walk the whole event chain in one read transaction (consistent snapshot)."""
        with self.dialect.read() as conn:
            head = conn.execute(self.dialect.sql(rows.HEAD)).fetchone()
            cur = conn.execute(self.dialect.sql(rows.SELECT_ALL_EVENTS))
            events = _stream(cur)
            return verify(events, int(head[0]), str(head[1]))

    def bulk_insert(self, params: Sequence[Sequence[Any]]) -> None:
        """Benchmark/import helper: raw ``INSERT_ALLOCATION_BULK`` rows, no events."""
        with self._write("bulk_insert") as tx:
            tx.conn.cursor().executemany(self.dialect.sql(rows.INSERT_ALLOCATION_BULK), params)


def _stream(cur: Cursor) -> Iterator[EventRecord]:
    while batch := cur.fetchmany(5_000):
        yield from map(rows.event_from_row, batch)


def _gpus_json(gpus: Sequence[tuple[str, str, int]]) -> str:
    return json.dumps([[str(u), str(m), int(t)] for u, m, t in gpus], separators=(",", ":"))


def _decision_payload(d: Decision, ids: list[int]) -> dict[str, Any]:
    """Everything the decision said, so the trail alone can rebuild the allocation rows."""
    return {
        "allocation_ids": ids,
        "decided_at": repr(d.decided_at),
        "policy": d.policy,
        "pod": {
            "uid": d.pod.uid,
            "namespace": d.pod.namespace,
            "name": d.pod.name,
            "owner_kind": d.pod.owner_kind,
            "owner_name": d.pod.owner_name,
            "labels": d.pod.labels,
        },
        "node": {
            "name": d.node.name,
            "instance_type": d.node.instance_type,
            "capacity_type": d.node.capacity_type,
            "zone": d.node.zone,
            "nodepool": d.node.nodepool,
        },
        "grants": [
            {
                "gpu_uuid": g.gpu_uuid,
                "gpu_index": g.gpu_index,
                "model": g.model,
                "memory_mib": g.memory_mib,
                "gpu_total_mib": g.gpu_total_mib,
                "sharing": g.sharing.value,
                "price_per_hour": str(g.price_per_hour),
                "mig_profile": g.mig_profile,
                "claim": g.claim,
                "dra_device": g.dra_device,
            }
            for g in d.grants
        ],
    }
