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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from typing import TYPE_CHECKING

from extender.core.allocation import Allocation
from extender.ledger.charges import (
    GIB_HOURS_STEP,
    MIB_PER_GIB,
    PRECISION,
    ROUNDING,
    SECONDS_PER_HOUR,
    allocation_seconds,
    cents,
    node_costs,
)
from extender.ledger.records import NodePeriod

if TYPE_CHECKING:
    from extender.ledger.base import Ledger

NO_LABEL = "(none)"
UNKNOWN = "(unknown)"
GROUPS = ("namespace", "node", "capacity-type", "pod")


@dataclass(frozen=True)
class GroupLine:
    key: str
    allocations: int
    gib_hours: Decimal
    cost: Decimal
    mean_used_mib: float | None
    mean_sm_util: float | None


@dataclass(frozen=True)
class NodeLine:
    node: str
    instance_type: str
    capacity_type: str
    gpu_hours: Decimal
    cost: Decimal
    charged: Decimal
    idle: Decimal
    oversubscribed: bool
    unpriced: bool  # allocations on a node the nodes table never saw


@dataclass(frozen=True)
class ChargebackReport:
    start: float
    end: float
    group_by: str
    groups: tuple[GroupLine, ...]
    nodes: tuple[NodeLine, ...]
    total_charged: Decimal
    total_node_cost: Decimal
    total_idle: Decimal
    rounding: str = ROUNDING

    @property
    def oversubscribed(self) -> tuple[str, ...]:
        return tuple(n.node for n in self.nodes if n.oversubscribed)


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
        "sm_weight",
        "sm_weighted",
        "used_weight",
        "used_weighted",
    )

    def __init__(self) -> None:
        self.allocs = 0
        self.money = Decimal(0)
        self.mib_seconds = Decimal(0)
        self.used_weight = 0.0
        self.used_weighted = 0.0
        self.sm_weight = 0.0
        self.sm_weighted = 0.0

    def add(self, a: Allocation, seconds: Decimal, money: Decimal) -> None:
        self.allocs += 1
        self.money += money
        self.mib_seconds += a.grant.memory_mib * seconds
        if a.obs_count > 0:
            w = float(seconds)
            self.used_weight += w
            self.used_weighted += a.obs_mean_mib * w
            if a.obs_mean_sm is not None:
                self.sm_weight += w
                self.sm_weighted += a.obs_mean_sm * w

    def line(self, key: str) -> GroupLine:
        gib_hours = self.mib_seconds / MIB_PER_GIB / SECONDS_PER_HOUR
        used = self.used_weighted / self.used_weight if self.used_weight > 0 else None
        sm = self.sm_weighted / self.sm_weight if self.sm_weight > 0 else None
        return GroupLine(
            key,
            self.allocs,
            gib_hours.quantize(GIB_HOURS_STEP, ROUND_HALF_EVEN),
            cents(self.money),
            used,
            sm,
        )


def compute(
    rows: Iterable[Allocation],
    periods: Sequence[NodePeriod],
    start: float,
    end: float,
    now: float,
    group_by: str = "namespace",
) -> ChargebackReport:
    """Charges per group, cost and idle per node, for the window ``[start, end)``."""
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
            money = a.grant.price_per_hour * secs / SECONDS_PER_HOUR
            acc = groups.get(key := group_key(a, group_by))
            if acc is None:
                acc = groups[key] = _Acc()
            acc.add(a, secs, money)
            node = a.node.name
            charged_by_node[node] = charged_by_node.get(node, Decimal(0)) + money
            capacity_by_node.setdefault(node, a.node.capacity_type)
        lines = tuple(sorted((acc.line(k) for k, acc in groups.items()), key=lambda g: g.key))
        nodes = _node_lines(node_costs(periods, start, end, now), charged_by_node, capacity_by_node)
    total_charged = sum((g.cost for g in lines), Decimal("0.00"))
    total_cost = sum((n.cost for n in nodes), Decimal("0.00"))
    return ChargebackReport(
        start, end, group_by, lines, nodes, total_charged, total_cost, total_cost - total_charged
    )


def _node_lines(
    costs: dict[str, tuple[Decimal, Decimal, NodePeriod]],
    charged: dict[str, Decimal],
    capacity: dict[str, str],
) -> tuple[NodeLine, ...]:
    """Per node: cost, Σ charges and idle, each rounded once; idle is the remainder."""
    lines = []
    for name in sorted(set(costs) | set(charged)):
        exact_charged = charged.get(name, Decimal(0))
        if name in costs:
            exact_cost, hours, p = costs[name]
            cost, paid = cents(exact_cost), cents(exact_charged)
            lines.append(
                NodeLine(
                    name,
                    p.instance_type,
                    p.capacity_type or UNKNOWN,
                    hours.quantize(GIB_HOURS_STEP, ROUND_HALF_EVEN),
                    cost,
                    paid,
                    cost - paid,
                    cost - paid < 0,
                    False,
                )
            )
        else:  # never recorded by record_node: its cost is unknown, bill what was granted
            paid = cents(exact_charged)
            lines.append(
                NodeLine(
                    name,
                    "",
                    capacity.get(name) or UNKNOWN,
                    Decimal(0),
                    paid,
                    paid,
                    Decimal("0.00"),
                    False,
                    True,
                )
            )
    return tuple(lines)


def chargeback_report(
    ledger: Ledger, start: float, end: float, group_by: str, now: float
) -> ChargebackReport:
    """Read the window's rows and node periods, then price them (pure ``compute``)."""
    return compute(
        ledger.charge_rows(start, end), ledger.node_periods(start, end), start, end, now, group_by
    )
