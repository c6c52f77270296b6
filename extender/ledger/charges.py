"""What one allocation and one node cost over a window: exact time and money (pure).

Money is exact: prices are ``Decimal``, timestamps enter as ``Decimal(repr(t))``
(the shortest decimal that round-trips the float, so ``1.1`` stays ``1.1``), and
arithmetic runs in a 50-digit context. Each amount is rounded **once**, at the end,
to the cent with ``ROUND_HALF_EVEN`` (banker's rounding: no upward drift when many
half-cents are rounded); ``cents`` is that one step.

- an allocation pays ``price_per_hour * hours`` where ``price_per_hour`` is the slice
  price stored at decision time (node GPU $/h * granted MiB / GPU total MiB; an
  exclusive whole GPU pays all its memory). Equivalently GiB-hours granted * the
  price per GiB-hour of that GPU.
- it is charged from ``decided_at`` (the memory is reserved for it from that moment)
  to ``ended_at``; an active one counts until ``min(to, now)``; rows are clipped to
  the window ``[from, to)``. FAILED rows are never charged.
- a node costs ``gpu_price_per_hour * gpu_count * hours present`` (from node periods).
- an unknown price (NULL in the ledger) is unknown here too: an unpriced grant has no
  charge and an unpriced node no cost (``None``), never $0 (docs/billing.md).
- billing follows what was received: a row kubelet's pod-resources settled has a
  receipt (``core.received``), and its memory and price are the receipt's (``billed``).
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import ROUND_HALF_EVEN, Decimal, localcontext

from extender.core.allocation import Allocation, Status
from extender.core.received import Receipt
from extender.ledger.records import NodePeriod

CENT = Decimal("0.01")
GIB_HOURS_STEP = Decimal("0.0001")
ROUNDING = "to the cent (0.01 USD), ROUND_HALF_EVEN, once per reported amount"
SECONDS_PER_HOUR = Decimal(3600)
MIB_PER_GIB = Decimal(1024)
PRECISION = 50


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


def allocation_seconds(a: Allocation, start: float, end: float, now: float) -> Decimal:
    """Seconds of ``a`` billed inside ``[start, end)``; 0 for failed rows."""
    if a.status == Status.FAILED:
        return Decimal(0)
    a_end = a.ended_at if a.ended_at is not None else min(end, now)
    return overlap_seconds(a.decided_at, a_end, start, end)


def billed(a: Allocation, receipt: Receipt | None) -> tuple[int, Decimal | None]:
    """The MiB and the price per hour a row is billed at: its receipt's (what the pod
    received), else its grant's."""
    if receipt is not None and receipt.allocation_id == a.id:
        return receipt.memory_mib, receipt.price_per_hour
    return a.grant.memory_mib, a.grant.price_per_hour


def allocation_charge(
    a: Allocation, start: float, end: float, now: float, receipt: Receipt | None = None
) -> Decimal | None:
    """Exact (unrounded) charge of one allocation in the window; None when unpriced."""
    _, price = billed(a, receipt)
    if price is None:
        return None
    with localcontext() as ctx:
        ctx.prec = PRECISION
        return price * allocation_seconds(a, start, end, now) / SECONDS_PER_HOUR


class NodeCost:
    """A node's GPU cost over a window: exact money for the priced stretches, GPU-hours,
    and the GPU-hours whose price is unknown (then the cost as a whole is unknown)."""

    __slots__ = ("hours", "money", "period", "unpriced_hours")

    def __init__(self, period: NodePeriod) -> None:
        self.money = Decimal(0)
        self.hours = Decimal(0)
        self.unpriced_hours = Decimal(0)
        self.period = period  # the last one seen, for labels

    @property
    def cost(self) -> Decimal | None:
        return None if self.unpriced_hours > 0 else self.money


def node_costs(
    periods: Iterable[NodePeriod], start: float, end: float, now: float
) -> dict[str, NodeCost]:
    """Exact GPU cost and GPU-hours per node over the window; a period without a price
    adds unpriced GPU-hours, never $0."""
    out: dict[str, NodeCost] = {}
    with localcontext() as ctx:
        ctx.prec = PRECISION
        for p in periods:
            until = p.until if p.until is not None else min(end, now)
            secs = overlap_seconds(p.since, until, start, end)
            gpu_hours = p.gpu_count * secs / SECONDS_PER_HOUR
            acc = out.setdefault(p.node, NodeCost(p))
            acc.period = p
            acc.hours += gpu_hours
            if p.gpu_price_per_hour is None:
                acc.unpriced_hours += gpu_hours
            else:
                acc.money += p.gpu_price_per_hour * gpu_hours
    return out
