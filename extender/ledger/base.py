"""The ledger interface: the durable record of every allocation decision.

The scheduling path depends only on this protocol; SQLite (default) and PostgreSQL
implement it with the same schema. The write methods up to ``close`` are what the
scheduling path calls; the read methods below them serve the audit API, the CLI,
chargeback and metrics.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Protocol

from extender.core.allocation import Allocation, Decision, EventKind, NodeRef, Observation
from extender.core.received import Held, Receipt
from extender.ledger.records import (
    AllocationFilter,
    ChainReport,
    DiscrepancyRecord,
    EventRecord,
    NodePeriod,
    NodeRecord,
)


class Ledger(Protocol):
    def record_decision(self, decision: Decision) -> list[Allocation]:
        """Atomically write one RESERVED row per grant plus a ``decision`` event.

        Raises ``AlreadyAllocated`` if the pod already has an active allocation,
        ``CapacityExceeded`` if a GPU's active grants plus these would exceed its memory
        (``ledger/capacity.py``; nothing is written), and ``LedgerUnavailable`` if the
        database cannot be written.
        """
        ...

    def mark_bound(self, pod_uid: str, at: float) -> None:
        """RESERVED -> BOUND for the pod's rows, plus a ``bound`` event."""
        ...

    def mark_bound_later(self, pod_uid: str, at: float) -> None:
        """``mark_bound``, returning at once: durable with the next write transaction,
        or the ledger's ``ride_s`` (50 ms) later when none comes. The bind path's: the pod's
        decision is already durable, and a RESERVED row bills exactly as a BOUND one
        (from ``decided_at``); a status that never lands is corrected when the pod
        starts (``mark_started`` moves RESERVED rows too)."""
        ...

    def flush(self) -> None:
        """Wait until every ``mark_bound_later`` so far is durable (or failed)."""
        ...

    def fail_bind(self, pod_uid: str, at: float, error: str) -> None:
        """RESERVED -> FAILED (ended, never charged), plus a ``bind-failed`` event."""
        ...

    def mark_started(self, pod_uid: str, at: float) -> None:
        """BOUND -> RUNNING (sets started_at once), plus a ``started`` event.

        A RESERVED row also moves to RUNNING (a running pod was bound, even if the
        bind confirmation was missed); bound_at is then set to ``at``.
        """
        ...

    def release(self, pod_uid: str, at: float, reason: str) -> int:
        """End the pod's active rows (ended_at, end_reason); returns rows ended."""
        ...

    def release_node(self, node: str, at: float, reason: str) -> int:
        """End every active row on a node (node deleted, spot interruption)."""
        ...

    def ping(self) -> None:
        """A trivial read: returns when the database answers, else ``LedgerUnavailable``."""
        ...

    def active(self) -> list[Allocation]:
        """Every RESERVED/BOUND/RUNNING row: what the extender rebuilds reservations from."""
        ...

    def for_pod(self, pod_uid: str) -> list[Allocation]:
        """Every row of a pod, newest first."""
        ...

    def observe(self, observations: Sequence[Observation], at: float) -> None:
        """Fold usage samples into the matching active rows' rollup (peak, time-weighted mean)."""
        ...

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
        """Record an overrun / leak / unaccounted finding (deduplicated while it persists)."""
        ...

    def record_received(self, held: Held, at: float) -> list[Receipt]:
        """Settle the pod's active rows from what kubelet says it holds (``receipts``);
        returns the receipts new or changed, each also a ``received`` event."""
        ...

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
        """An ``acknowledged`` event: the node's device plugin gave the pod ``slots``
        on ``gpu_uuids``, seen ``waited_s`` after the bind (no row changes)."""
        ...

    def record_node(
        self,
        node: NodeRef,
        gpus: Sequence[tuple[str, str, int]],
        gpu_price_per_hour: Decimal | None,
        at: float,
    ) -> None:
        """Upsert a node: ``gpus`` are (uuid, model, total_mib); price is per GPU-hour.

        Call it when a node is first seen, when its price or GPUs change (a new price
        period opens), and periodically to extend ``last_seen``.
        """
        ...

    def node_gone(self, name: str, at: float, reason: str) -> None:
        """The node left: stop its cost clock (release its rows with ``release_node``)."""
        ...

    def close(self) -> None: ...

    # ---- reads (audit API, CLI, chargeback, metrics) --------------------------------
    def get_allocation(self, allocation_id: int) -> Allocation | None:
        """One row by id, or None."""
        ...

    def list_allocations(
        self, flt: AllocationFilter, after_id: int = 0, limit: int = 100
    ) -> list[Allocation]:
        """Rows matching ``flt`` with id > ``after_id``, by id, at most ``limit``."""
        ...

    def charge_rows(self, start: float, end: float) -> Iterator[Allocation]:
        """Every non-failed row overlapping ``[start, end)`` (streamed)."""
        ...

    def receipts(self, start: float, end: float) -> list[Receipt]:
        """Receipts of the non-failed rows overlapping ``[start, end)`` (chargeback)."""
        ...

    def receipts_for(self, allocation_ids: Sequence[int]) -> list[Receipt]:
        """Receipts of these allocations (the audit API's page)."""
        ...

    def node_periods(self, start: float, end: float) -> list[NodePeriod]:
        """Node price periods overlapping ``[start, end)``."""
        ...

    def nodes(self) -> list[NodeRecord]:
        """Every node the ledger has seen, by name."""
        ...

    def list_events(self, after_seq: int = 0, limit: int = 100) -> list[EventRecord]:
        """Events with seq > ``after_seq``, in order."""
        ...

    def list_discrepancies(
        self, open_only: bool, at: float, after_id: int = 0, limit: int = 100
    ) -> list[DiscrepancyRecord]:
        """Findings by id; open ones are unclosed and seen recently (as of ``at``)."""
        ...

    def verify_chain(self) -> ChainReport:
        """Walk the event hash chain and report the first broken link."""
        ...
