"""Plain read-side records of the ledger (no I/O): what queries return.

Kept apart from ``extender.core.allocation`` (the data the scheduling path shares,
``Allocation`` among it) so the audit API and the CLI can grow without touching it.
Each record's fields are named for the columns it is read from (``named.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

__all__ = [
    "AllocationFilter",
    "ChainReport",
    "DiscrepancyRecord",
    "EventRecord",
    "NodePeriod",
    "NodeRecord",
]


@dataclass(frozen=True)
class AllocationFilter:
    """Filters of ``list_allocations``; ``None`` means "any"."""

    namespace: str | None = None
    node: str | None = None
    pod: str | None = None  # pod name or pod UID
    active: bool | None = None
    start: float | None = None  # overlaps [start, end)
    end: float | None = None


@dataclass(frozen=True)
class NodePeriod:
    """A stretch of time a node existed at one GPU price and GPU count.

    Node cost is computed from these, so a spot price change or a node leaving
    mid-window is billed exactly for the time at each price.
    """

    node: str
    instance_type: str
    capacity_type: str
    gpu_count: int
    gpu_total_mib: int
    gpu_price_per_hour: Decimal | None  # None: the node's price is unknown
    since: float
    until: float | None  # None: still open (present "until now")


@dataclass(frozen=True)
class EventRecord:
    """One row of the append-only, hash-chained event trail."""

    seq: int
    at: float
    kind: str
    pod_uid: str
    node: str
    gpu_uuid: str
    payload: str  # canonical JSON, exactly the bytes that were hashed
    prev_hash: str
    hash: str


@dataclass(frozen=True)
class DiscrepancyRecord:
    """A deduplicated overrun / leak / unaccounted finding."""

    id: int
    kind: str
    node: str
    gpu_uuid: str
    pod_uid: str
    first_seen: float
    last_seen: float
    count: int
    max_amount_mib: int
    last_amount_mib: int
    detail: str
    closed_at: float | None


@dataclass(frozen=True)
class NodeRecord:
    """The current state of one node in the ``nodes`` table."""

    name: str
    instance_type: str
    capacity_type: str
    zone: str
    nodepool: str
    gpu_count: int
    gpu_total_mib: int
    gpu_price_per_hour: Decimal | None  # None: the node's price is unknown
    gpus: list[tuple[str, str, int]] = field(default_factory=list)
    first_seen: float = 0.0
    last_seen: float = 0.0
    gone_at: float | None = None
    gone_reason: str = ""


@dataclass(frozen=True)
class ChainReport:
    """Result of walking the event hash chain."""

    ok: bool
    events: int
    first_bad_seq: int | None = None
    reason: str = ""
