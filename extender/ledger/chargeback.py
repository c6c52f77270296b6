"""Chargeback: who pays for which GPU memory over a window, grouped, beside node cost.

Each allocation's charge and each node's cost come from ``charges.py`` (exact, rounded
once). This module groups the charges (namespace, node, capacity type, pod or a pod
label) and sets them against node cost: ``idle = node cost - Σ charges on it``, so
``Σ charges + idle == node cost`` holds exactly, both before rounding and to the cent
after it. A negative idle means the node's GPUs were sold more than once
(oversubscribed): flagged. Utilisation (time-weighted mean used MiB, mean SM %)
stands beside cost as a signal; it never changes what anyone pays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from typing import TYPE_CHECKING

from extender.core.allocation import Allocation
from extender.core.received import Receipt
from extender.ledger.charges import (
    GIB_HOURS_STEP,
    MIB_PER_GIB,
    PRECISION,
    ROUNDING,
    SECONDS_PER_HOUR,
    NodeCost,
    allocation_seconds,
    billed,
    cents,
    node_costs,
)
from extender.ledger.records import NodePeriod

if TYPE_CHECKING:
    from extender.ledger.base import Ledger

UNPRICED = "unpriced"
NO_LABEL = "(none)"
UNKNOWN = "(unknown)"
GROUPS = ("namespace", "node", "capacity-type", "pod")


@dataclass(frozen=True)
class GroupLine:
    key: str
    allocations: int
    gib_hours: Decimal
    cost: Decimal | None  # of the priced grants; None when every grant was unpriced
    mean_used_mib: float | None
    mean_sm_util: float | None
    unpriced_gib_hours: Decimal = Decimal("0.0000")  # granted on nodes with no price


@dataclass(frozen=True)
class NodeLine:
    node: str
    instance_type: str
    capacity_type: str
    gpu_hours: Decimal
    cost: Decimal | None  # None: unpriced (no price for some of its time, or never seen)
    charged: Decimal
    idle: Decimal | None  # cost - charged; None when the cost is unknown
    oversubscribed: bool
    unpriced: bool


@dataclass(frozen=True)
class ChargebackReport:
    start: float
    end: float
    group_by: str
    groups: tuple[GroupLine, ...]
    nodes: tuple[NodeLine, ...]
    total_charged: Decimal
    total_node_cost: Decimal  # of the priced nodes
    total_idle: Decimal  # of the priced nodes
    rounding: str = ROUNDING

    @property
    def oversubscribed(self) -> tuple[str, ...]:
        return tuple(n.node for n in self.nodes if n.oversubscribed)

    @property
    def unpriced_nodes(self) -> tuple[str, ...]:
        """Nodes whose cost is unknown: left out of the totals, never counted as $0."""
        return tuple(n.node for n in self.nodes if n.unpriced)

    @property
    def unpriced_gib_hours(self) -> Decimal:
        return sum((g.unpriced_gib_hours for g in self.groups), Decimal("0.0000"))


def shown(amount: Decimal | None) -> str:
    """Money as text people read: an unknown amount is ``unpriced``, never 0.00."""
    return UNPRICED if amount is None else str(amount)


def parse_group_by(value: str) -> str:
    """Validate a ``group_by`` value; raise ``ValueError`` saying why it is wrong."""
    if value in GROUPS:
        return value
    if value.startswith("label:") and len(value) > len("label:"):
        return value
    allowed = ", ".join((*GROUPS, "label:KEY"))
    raise ValueError(f"unknown grouping {value!r}; use one of {allowed}")


def group_key(a: Allocation, group_by: str) -> str:
    if group_by == "namespace":
        return a.pod.namespace
    if group_by == "node":
        return a.node.name
    if group_by == "capacity-type":
        return a.node.capacity_type or UNKNOWN
    if group_by == "pod":
        return f"{a.pod.namespace}/{a.pod.name}"
    value = a.pod.labels.get(group_by.removeprefix("label:"))
    return NO_LABEL if value is None else str(value)


class _Acc:
    """Running exact sums for one group (private, mutable, local to one compute)."""

    __slots__ = (
        "allocs",
        "mib_seconds",
        "money",
        "priced",
        "sm_weight",
        "sm_weighted",
        "unpriced_mib_seconds",
        "used_weight",
        "used_weighted",
    )

    def __init__(self) -> None:
        self.allocs = 0
        self.money = Decimal(0)
        self.priced = 0
        self.mib_seconds = Decimal(0)
        self.unpriced_mib_seconds = Decimal(0)
        self.used_weight = 0.0
        self.used_weighted = 0.0
        self.sm_weight = 0.0
        self.sm_weighted = 0.0

    def add(self, a: Allocation, mib: int, seconds: Decimal, money: Decimal | None) -> None:
        self.allocs += 1
        self.mib_seconds += mib * seconds
        if money is None:
            self.unpriced_mib_seconds += mib * seconds
        else:
            self.priced += 1
            self.money += money
        if a.obs_count > 0:
            w = float(seconds)
            self.used_weight += w
            self.used_weighted += a.obs_mean_mib * w
            if a.obs_mean_sm is not None:
                self.sm_weight += w
                self.sm_weighted += a.obs_mean_sm * w

    def line(self, key: str) -> GroupLine:
        used = self.used_weighted / self.used_weight if self.used_weight > 0 else None
        sm = self.sm_weighted / self.sm_weight if self.sm_weight > 0 else None
        return GroupLine(
            key,
            self.allocs,
            _gib_hours(self.mib_seconds),
            cents(self.money) if self.priced else None,
            used,
            sm,
            _gib_hours(self.unpriced_mib_seconds),
        )


def _gib_hours(mib_seconds: Decimal) -> Decimal:
    return (mib_seconds / MIB_PER_GIB / SECONDS_PER_HOUR).quantize(GIB_HOURS_STEP, ROUND_HALF_EVEN)


def compute(
    rows: Iterable[Allocation],
    periods: Sequence[NodePeriod],
    start: float,
    end: float,
    now: float,
    group_by: str = "namespace",
    receipts: Mapping[int, Receipt] | None = None,
) -> ChargebackReport:
    """Charges per group, cost and idle per node, for the window ``[start, end)``; a row
    with a receipt (by allocation id) is billed for what its pod received."""
    receipts = receipts or {}
    group_by = parse_group_by(group_by)
    groups: dict[str, _Acc] = {}
    charged_by_node: dict[str, Decimal] = {}
    capacity_by_node: dict[str, str] = {}
    with localcontext() as ctx:
        ctx.prec = PRECISION
        for a in rows:
            secs = allocation_seconds(a, start, end, now)
            if secs <= 0:
                continue
            mib, price = billed(a, receipts.get(a.id))
            money = None if price is None else price * secs / SECONDS_PER_HOUR
            acc = groups.get(key := group_key(a, group_by))
            if acc is None:
                acc = groups[key] = _Acc()
            acc.add(a, mib, secs, money)
            node = a.node.name
            charged_by_node[node] = charged_by_node.get(node, Decimal(0)) + (money or 0)
            capacity_by_node.setdefault(node, a.node.capacity_type)
        lines = tuple(sorted((acc.line(k) for k, acc in groups.items()), key=lambda g: g.key))
        nodes = _node_lines(node_costs(periods, start, end, now), charged_by_node, capacity_by_node)
    total_charged = sum((g.cost for g in lines if g.cost is not None), Decimal("0.00"))
    total_cost = sum((n.cost for n in nodes if n.cost is not None), Decimal("0.00"))
    return ChargebackReport(
        start, end, group_by, lines, nodes, total_charged, total_cost, total_cost - total_charged
    )


def _node_lines(
    costs: dict[str, NodeCost],
    charged: dict[str, Decimal],
    capacity: dict[str, str],
) -> tuple[NodeLine, ...]:
    """Per node: cost, Σ charges and idle, each rounded once; idle is the remainder. A
    node with no price for part of the window, or never recorded at all, is unpriced:
    its cost and idle are unknown (None), never $0."""
    lines = []
    for name in sorted(set(costs) | set(charged)):
        paid = cents(charged.get(name, Decimal(0)))
        c = costs.get(name)
        exact = c.cost if c is not None else None
        cost = cents(exact) if exact is not None else None
        idle = cost - paid if cost is not None else None
        p = c.period if c is not None else None
        lines.append(
            NodeLine(
                name,
                p.instance_type if p else "",
                (p.capacity_type if p else capacity.get(name, "")) or UNKNOWN,
                c.hours.quantize(GIB_HOURS_STEP, ROUND_HALF_EVEN) if c else Decimal("0.0000"),
                cost,
                paid,
                idle,
                idle is not None and idle < 0,
                cost is None,
            )
        )
    return tuple(lines)


def chargeback_report(
    ledger: Ledger, start: float, end: float, group_by: str, now: float
) -> ChargebackReport:
    """Read the window's rows, receipts and node periods, then price them (pure ``compute``)."""
    got = {r.allocation_id: r for r in ledger.receipts(start, end)}
    rows, periods = ledger.charge_rows(start, end), ledger.node_periods(start, end)
    return compute(rows, periods, start, end, now, group_by, got)
