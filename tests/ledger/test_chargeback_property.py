"""Property: for random allocations and windows, Σ charges + idle == node cost, exactly.

The expected numbers are computed independently with ``fractions.Fraction`` (exact
rationals) and rounded half-to-even by hand, so an inexact price, a wrong clip or a
double rounding in ``chargeback`` shows up as a mismatch.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.allocation import Allocation, GpuGrant, NodeRef, PodRef, Sharing, Status
from extender.ledger.chargeback import compute
from extender.ledger.records import NodePeriod
from tests.support import known

T0 = 1_767_225_600
GPU_MIB = 81_920


def _t(ms: int) -> float:
    return T0 + ms / 1000


def _round_cents(x: Fraction) -> Decimal:
    scaled = x * 100
    floor = scaled.numerator // scaled.denominator
    rest = scaled - floor
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2 == 1):
        floor += 1
    return Decimal(floor) / 100


def _overlap(a: float, b: float, lo: float, hi: float) -> Fraction:
    s, e = max(a, lo), min(b, hi)
    return max(Fraction(repr(e)) - Fraction(repr(s)), Fraction(0))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Allocation], list[NodePeriod], float, float]:
    horizon = 10 * 3600 * 1000
    rows: list[Allocation] = []
    periods: list[NodePeriod] = []
    for n in range(draw(st.integers(1, 3))):
        name = f"node-{n}"
        price = Decimal(draw(st.integers(1, 5000))) / 100
        gpus = draw(st.integers(1, 4))
        since = draw(st.integers(0, horizon // 2))
        until = draw(st.integers(since + 1, horizon))
        periods.append(
            NodePeriod(name, "p5", "spot", gpus, gpus * GPU_MIB, price, _t(since), _t(until))
        )
        for g in range(gpus):
            budget = GPU_MIB  # slices on one GPU never exceed it: no oversubscription
            for _ in range(draw(st.integers(0, 4))):
                mib = draw(st.integers(0, budget))
                budget -= mib
                if mib == 0:
                    continue
                a = draw(st.integers(since, until))
                b = draw(st.integers(a, until))
                ended = draw(st.booleans())
                n_row = len(rows)
                grant = GpuGrant(
                    f"{name}-gpu{g}", g, "H100", mib, GPU_MIB, Sharing.SHARED, price * mib / GPU_MIB
                )
                rows.append(
                    Allocation(
                        id=n_row + 1,
                        pod=PodRef(f"uid{n_row}", draw(st.sampled_from(["a", "b"])), f"p{n_row}"),
                        node=NodeRef(name, capacity_type="spot"),
                        grant=grant,
                        status=Status.ENDED if ended else Status.RUNNING,
                        decided_at=_t(a),
                        ended_at=_t(b) if ended else None,
                    )
                )
    lo = draw(st.integers(0, horizon))
    hi = draw(st.integers(lo, horizon))
    return rows, periods, _t(lo), _t(hi)


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.integers(0, 12 * 3600 * 1000), st.sampled_from(["namespace", "pod", "node"]))
def test_charges_plus_idle_equal_node_cost(
    scenario: tuple[list[Allocation], list[NodePeriod], float, float], now_ms: int, group_by: str
) -> None:
    rows, periods, start, end = scenario
    now = _t(now_ms)
    report = compute(rows, periods, start, end, now, group_by)
    for p in periods:
        (line,) = [n for n in report.nodes if n.node == p.node]
        until = min(p.until or end, end)
        cost = (
            Fraction(known(p.gpu_price_per_hour))
            * p.gpu_count
            * _overlap(p.since, until, start, end)
            / 3600
        )
        charged = sum(
            (
                Fraction(known(r.grant.price_per_hour))
                * _overlap(
                    r.decided_at,
                    r.ended_at if r.ended_at is not None else min(end, now),
                    start,
                    end,
                )
                / 3600
                for r in rows
                if r.node.name == p.node
            ),
            Fraction(0),
        )
        assert line.cost == _round_cents(cost)
        assert line.charged == _round_cents(charged)
        assert line.charged + known(line.idle) == line.cost
        # slices never exceed the GPU, but an active row runs to `now`, past the node's end
        if all(r.ended_at is not None for r in rows if r.node.name == p.node):
            assert not line.oversubscribed and known(line.idle) >= 0
    assert report.total_charged == sum((known(g.cost) for g in report.groups), Decimal(0))
    assert report.total_charged + report.total_idle == report.total_node_cost
