"""Chargeback: who pays for which GPU memory, over a time window. Pure functions.

Money is exact: prices are ``Decimal``, timestamps enter as ``Decimal(repr(t))``
(the shortest decimal that round-trips the float, so ``1.1`` stays ``1.1``), and
arithmetic runs in a 50-digit context. Each amount is rounded **once**, at the end,
to the cent with ``ROUND_HALF_EVEN`` (banker's rounding: no upward drift when many
half-cents are rounded).

Model:
- an allocation pays ``price_per_hour * hours`` where ``price_per_hour`` is the slice
  price stored at decision time (node GPU $/h * granted MiB / GPU total MiB; an
  exclusive whole GPU pays all its memory). Equivalently GiB-hours granted * the
  price per GiB-hour of that GPU.
- it is charged from ``decided_at`` (the memory is reserved for it from that moment)
  to ``ended_at``; an active one counts until ``min(to, now)``; rows are clipped to
  the window ``[from, to)``. FAILED rows are never charged.
- a node costs ``gpu_price_per_hour * gpu_count * hours present`` (from node
  periods). ``idle = node cost - Σ charges on it``, so ``Σ charges + idle == node
  cost`` holds exactly, both before rounding and to the cent after it. A negative
  idle means the node's GPUs were sold more than once (oversubscribed): flagged.
- utilisation (time-weighted mean used MiB, mean SM %) stands beside cost as a
  signal; it never changes what anyone pays.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from typing import NamedTuple

CENT = Decimal("0.01")
GIB_HOURS_STEP = Decimal("0.0001")
ROUNDING = "to the cent (0.01 USD), ROUND_HALF_EVEN, once per reported amount"
SECONDS_PER_HOUR = Decimal(3600)
MIB_PER_GIB = Decimal(1024)
NO_LABEL = "(none)"
UNKNOWN = "(unknown)"
GROUPS = ("namespace", "node", "capacity-type", "pod")
_PRECISION = 50


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
    gpu_price_per_hour: Decimal
    since: float
    until: float | None  # None: still open (present "until now")


class ChargeRow(NamedTuple):
    """The slice of an allocation row chargeback needs (plain, cheap to build)."""

    allocation_id: int
    pod_uid: str
    namespace: str
    pod_name: str
    labels_json: str  # parsed only when grouping by a label
    node: str
    capacity_type: str
    gpu_uuid: str
    memory_mib: int
    price_per_hour: Decimal
    start: float  # decided_at
    end: float | None  # ended_at; None while active
    status: str
    obs_count: int = 0
    obs_mean_mib: float = 0.0
    obs_mean_sm: float | None = None


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


LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z


def parse_timestamp(value: str) -> float:
    """RFC3339 (offset or Z required) or Unix seconds between 1970 and 9999 (what dates
    can show); ``ValueError`` otherwise, quoting at most 40 characters of the input."""
    try:
        t = float(value)
    except ValueError:
        t = math.nan
    if math.isfinite(t):
        if not 0 <= t <= LAST_SECOND:
            raise ValueError(f"unix seconds out of range (0..{LAST_SECOND}): {value[:40]!r}")
        return t
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        dt = None
    if dt is None or dt.tzinfo is None or "T" not in value.upper():
        raise ValueError(f"not RFC3339 or unix seconds: {value[:40]!r}")
    return min(max(dt.timestamp(), 0.0), float(LAST_SECOND))


def dec_time(t: float) -> Decimal:
    """A float timestamp as the decimal it was meant to be (exact, no binary noise)."""
    return Decimal(repr(float(t)))


def overlap_seconds(start: float, end: float, w_start: float, w_end: float) -> Decimal:
    """Length of ``[start, end) ∩ [w_start, w_end)`` in seconds, exact, never negative."""
    lo = max(start, w_start)
    hi = min(end, w_end)
    if hi <= lo:
        return Decimal(0)
    return dec_time(hi) - dec_time(lo)


def cents(amount: Decimal) -> Decimal:
    """The one rounding step: to the cent, half to even."""
    return amount.quantize(CENT, rounding=ROUND_HALF_EVEN)


def group_key(row: ChargeRow, group_by: str) -> str:
    if group_by == "namespace":
        return row.namespace
    if group_by == "node":
        return row.node
    if group_by == "capacity-type":
        return row.capacity_type or UNKNOWN
    if group_by == "pod":
        return f"{row.namespace}/{row.pod_name}"
    label = group_by.removeprefix("label:")
    labels = json.loads(row.labels_json) if row.labels_json else {}
    value = labels.get(label)
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

    def add(self, row: ChargeRow, seconds: Decimal) -> None:
        self.allocs += 1
        self.money += row.price_per_hour * seconds / SECONDS_PER_HOUR
        self.mib_seconds += row.memory_mib * seconds
        if row.obs_count > 0:
            w = float(seconds)
            self.used_weight += w
            self.used_weighted += row.obs_mean_mib * w
            if row.obs_mean_sm is not None:
                self.sm_weight += w
                self.sm_weighted += row.obs_mean_sm * w

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


def allocation_seconds(row: ChargeRow, start: float, end: float, now: float) -> Decimal:
    """Seconds of ``row`` billed inside ``[start, end)``; 0 for failed rows."""
    if row.status == "failed":
        return Decimal(0)
    row_end = row.end if row.end is not None else min(end, now)
    return overlap_seconds(row.start, row_end, start, end)


def allocation_charge(row: ChargeRow, start: float, end: float, now: float) -> Decimal:
    """Exact (unrounded) charge of one allocation in the window."""
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        return row.price_per_hour * allocation_seconds(row, start, end, now) / SECONDS_PER_HOUR


def node_costs(
    periods: Iterable[NodePeriod], start: float, end: float, now: float
) -> dict[str, tuple[Decimal, Decimal, NodePeriod]]:
    """Exact GPU cost and GPU-hours per node over the window (last period kept for labels)."""
    out: dict[str, tuple[Decimal, Decimal, NodePeriod]] = {}
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        for p in periods:
            until = p.until if p.until is not None else min(end, now)
            secs = overlap_seconds(p.since, until, start, end)
            gpu_hours = p.gpu_count * secs / SECONDS_PER_HOUR
            cost, hours, _ = out.get(p.node, (Decimal(0), Decimal(0), p))
            out[p.node] = (cost + p.gpu_price_per_hour * gpu_hours, hours + gpu_hours, p)
    return out


def compute(
    rows: Iterable[ChargeRow],
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
        ctx.prec = _PRECISION
        for row in rows:
            secs = allocation_seconds(row, start, end, now)
            if secs <= 0:
                continue
            acc = groups.get(key := group_key(row, group_by))
            if acc is None:
                acc = groups[key] = _Acc()
            acc.add(row, secs)
            money = row.price_per_hour * secs / SECONDS_PER_HOUR
            charged_by_node[row.node] = charged_by_node.get(row.node, Decimal(0)) + money
            capacity_by_node.setdefault(row.node, row.capacity_type)
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


def report_dict(report: ChargebackReport) -> dict[str, object]:
    """JSON-ready form; money as strings so no consumer turns it back into floats."""
    return {
        "from": report.start,
        "to": report.end,
        "group_by": report.group_by,
        "rounding": report.rounding,
        "groups": [
            {
                "key": g.key,
                "allocations": g.allocations,
                "gib_hours": str(g.gib_hours),
                "cost": str(g.cost),
                "mean_used_mib": g.mean_used_mib,
                "mean_sm_util": g.mean_sm_util,
            }
            for g in report.groups
        ],
        "nodes": [
            {
                "node": n.node,
                "instance_type": n.instance_type,
                "capacity_type": n.capacity_type,
                "gpu_hours": str(n.gpu_hours),
                "cost": str(n.cost),
                "charged": str(n.charged),
                "idle": str(n.idle),
                "oversubscribed": n.oversubscribed,
                "unpriced": n.unpriced,
            }
            for n in report.nodes
        ],
        "total_charged": str(report.total_charged),
        "total_node_cost": str(report.total_node_cost),
        "total_idle": str(report.total_idle),
        "oversubscribed_nodes": list(report.oversubscribed),
    }


def report_csv(report: ChargebackReport) -> str:
    """One row per group with a header row; utilisation blank where never observed."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [report.group_by, "allocations", "gib_hours", "cost_usd", "mean_used_mib", "mean_sm_util"]
    )
    for g in report.groups:
        w.writerow(
            [g.key, g.allocations, g.gib_hours, g.cost, _fmt(g.mean_used_mib), _fmt(g.mean_sm_util)]
        )
    return buf.getvalue()


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.1f}"
