"""The new policies (gpu-packing, headroom, the evaluator's baselines) and narrowing, each
against its stated formula on hand-worked cases."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.quality.baselines import DotProduct, RandomFit
from extender.scoring import (
    Context,
    Evaluation,
    GpuView,
    Limits,
    NodeView,
    Weights,
    evaluate,
    policy_by_name,
    priorities,
)
from extender.scoring.batch import GpuBatch
from extender.scoring.fragmentation import fragmentation_delta, fragmentation_of
from extender.scoring.narrowing import blended, narrow
from extender.scoring.policies import Fgd, GpuPacking, Headroom
from extender.scoring.policies.headroom import TIE
from extender.scoring.policy import Shape
from extender.state.demand import GpuDemand
from tests import fragmentation_reference as ref

GIB = 1024
EXACT = Limits(margin_mib=0, idle_mib=0)
MIX = (((1, 8 * GIB, ""), 0.5), ((1, None, ""), 0.5))
CTX = Context(limits=EXACT, mix=MIX)


def node(name: str, *used: int, capacity: str = "on-demand") -> NodeView:
    """24 GiB GPUs with ``used`` MiB committed on each."""
    gpus = tuple(
        GpuView(f"{name}-{i}", i, "A10G", 24 * GIB, u, reserved_mib=u) for i, u in enumerate(used)
    )
    return NodeView(name, gpus, capacity)


def test_new_policies_registered() -> None:
    assert policy_by_name("headroom").name == "headroom"
    assert policy_by_name("gpu-packing").name == "gpu-packing"


def test_gpu_packing_tiers() -> None:
    pack = GpuPacking()
    # 8 GiB onto a busy GPU (16 GiB used): tier 2, chosen fill after 24/24
    ev = evaluate(node("a", 0, 16 * GIB), GpuDemand(1, 8 * GIB), pack, CTX)
    assert [g.index for g in ev.chosen] == [1]
    assert ev.raw == pytest.approx(2.5)
    # a whole GPU on the same node must take the idle GPU0: tier 1
    ev = evaluate(node("a", 0, 16 * GIB), GpuDemand(1), pack, CTX)
    assert [g.index for g in ev.chosen] == [0]
    assert ev.raw == pytest.approx(1.5)
    # 4 GiB on an empty node opens it: tier 0, fill after 4/24
    ev = evaluate(node("b", 0, 0), GpuDemand(1, 4 * GIB), pack, CTX)
    assert ev.raw == pytest.approx(0.5 * 4 / 24)


def test_headroom_is_fgd_plus_a_small_fill_term() -> None:
    n = node("a", 0, 16 * GIB)
    ev = evaluate(n, GpuDemand(1, 8 * GIB), Headroom(), CTX)
    fgd = evaluate(n, GpuDemand(1, 8 * GIB), Fgd(), CTX)
    assert ev.chosen == fgd.chosen  # GPU1: F goes 4 GiB -> 0
    # -dF = 4 GiB; fill: chosen 24/24, node (16 + 8)/48
    assert ev.raw == pytest.approx(4.0 + TIE * (0.5 * 1 + 0.5 * 0.5))


def test_headroom_breaks_fgd_ties_towards_the_fuller_node() -> None:
    # a whole GPU taken from an empty node or from a node whose other GPU is full: dF = 0
    # on both, for FGD a tie; headroom's fill term prefers the full node
    empty, full = node("e", 0, 0), node("f", 0, 24 * GIB)
    whole = GpuDemand(1)
    assert evaluate(empty, whole, Fgd(), CTX).raw == evaluate(full, whole, Fgd(), CTX).raw == 0
    assert evaluate(empty, whole, Headroom(), CTX).raw == pytest.approx(TIE * 0.75)
    assert evaluate(full, whole, Headroom(), CTX).raw == pytest.approx(TIE * 1.0)


def test_headroom_best_fit_among_equal_fragmentation_gpus() -> None:
    # 4 GiB onto GPUs with 20 or 12 GiB free: with mix {1 x 2 GiB}, F is 0 either way;
    # best fit takes the fuller GPU (index 1)
    ctx = Context(limits=EXACT, mix=(((1, 2 * GIB, ""), 1.0),))
    ev = evaluate(node("a", 4 * GIB, 12 * GIB), GpuDemand(1, 4 * GIB), Headroom(), ctx)
    assert [g.index for g in ev.chosen] == [1]


states = st.lists(st.tuples(st.integers(0, 48 * GIB), st.booleans()), min_size=1, max_size=8)
mixes = st.lists(
    st.tuples(
        st.tuples(
            st.integers(1, 4),
            st.one_of(st.none(), st.integers(1, 48).map(lambda g: g * GIB)),
            st.sampled_from(["", "", "1g.10gb"]),
        ),
        st.floats(0.01, 1.0),
    ),
    min_size=1,
    max_size=6,
)


def view_of(name: str, state: ref.State) -> NodeView:
    """A node whose plain GPUs have this (free, idle) state under ``EXACT`` limits: an idle
    GPU is all free; a busy one holds 1 GiB beside its free memory."""
    gpus = tuple(
        GpuView(f"{name}-{i}", i, "X", f if idle else f + GIB, 0 if idle else GIB, 0 if idle else 1)
        for i, (f, idle) in enumerate(state)
    )
    return NodeView(name, gpus)


@given(st.lists(states, min_size=1, max_size=6), mixes, st.data())
def test_the_kernel_is_the_reference_fragmentation(
    many: list[ref.State], mix: list[tuple[Shape, float]], data: st.DataObject
) -> None:
    """F of every node at once (``fragmentation_of``) and F's change when one GPU takes
    a unit (``fragmentation_delta``) equal the plain-Python oracle exactly."""
    views = [view_of(f"n{k}", state) for k, state in enumerate(many)]
    assert [ref.node_state(v, EXACT)[0] for v in views] == many
    got = fragmentation_of(GpuBatch.from_views(views, EXACT), EXACT, mix).tolist()
    assert got == [ref.fragmentation(state, mix) for state in many]
    view, state = views[0], many[0]
    i = data.draw(st.integers(0, len(state) - 1))
    demand = GpuDemand(1, data.draw(st.one_of(st.none(), st.integers(1, 48 * GIB))))
    chosen = (view.gpus[i],)
    want = ref.fragmentation(ref.taken(state, i, view.gpus[i], demand, EXACT), mix)
    assert fragmentation_delta(view, demand, chosen, EXACT, mix) == want - ref.fragmentation(
        state, mix
    )


def test_dot_product_formula() -> None:
    ev = evaluate(node("a", 0, 16 * GIB), GpuDemand(1, 8 * GIB), DotProduct(), CTX)
    assert [g.index for g in ev.chosen] == [1]  # best fit
    d = (8 / 48, 1 / 2)
    r = (32 / 48, 1 / 2)  # 24 + 8 GiB free of 48; one idle GPU of two
    assert ev.raw == pytest.approx(1 - (d[0] * r[0] + d[1] * r[1]) / 2)


def test_random_fit_is_seeded_and_in_range() -> None:
    a = [evaluate(node("a", 0, 0), GpuDemand(1, GIB), RandomFit(3), CTX).raw for _ in range(3)]
    b = [evaluate(node("a", 0, 0), GpuDemand(1, GIB), RandomFit(3), CTX).raw for _ in range(3)]
    assert a == b and all(0 <= x < 1 for x in a)


# --- narrowing -----------------------------------------------------------------------------


def ev(raw: float, fits: bool = True) -> Evaluation:
    return Evaluation(fits, "" if fits else "no", raw=raw)


def test_narrow_hand_case() -> None:
    evals = {"a": ev(1.0), "b": ev(0.99), "c": ev(0.0), "x": ev(5.0, fits=False)}
    prices = dict.fromkeys(evals, 1.0)
    w = Weights(1.0, 0.0)
    assert blended(evals, prices, w) == {"a": 1.0, "b": pytest.approx(0.99), "c": 0.0}
    assert narrow(evals, prices, w, epsilon=0.02) == {"a", "b"}
    assert narrow(evals, prices, w, epsilon=0.0) == {"a"}
    assert narrow(evals, prices, w, epsilon=0.0, keep=5) == {"a", "b", "c"}  # never "x"
    assert narrow({"x": ev(1.0, fits=False)}, prices, w) == set()


def test_narrow_uses_the_cost_blend() -> None:
    # equal policy score; the spot node's lower price wins alone
    evals = {"od": ev(0.5), "spot": ev(0.5)}
    prices = {"od": 0.10, "spot": 0.04}
    assert narrow(evals, prices, Weights(1.0, 1.0), epsilon=0.0) == {"spot"}


raws = st.dictionaries(
    st.sampled_from([f"n{i}" for i in range(8)]),
    st.tuples(st.booleans(), st.floats(-50, 50), st.one_of(st.none(), st.floats(0.01, 1.0))),
    min_size=1,
)


@given(raws, st.floats(0, 0.5), st.integers(1, 4), st.floats(0.1, 3), st.floats(0, 3))
def test_narrow_keeps_the_best_and_never_empties(spec, eps, keep, wp, wc) -> None:
    evals = {n: ev(raw, fits) for n, (fits, raw, _) in spec.items()}
    prices = {n: p for n, (_, _, p) in spec.items()}
    w = Weights(wp, wc)
    out = narrow(evals, prices, w, epsilon=eps, keep=keep)
    fitting = {n for n, e in evals.items() if e.fits}
    assert out <= fitting
    assert bool(out) == bool(fitting)
    assert len(out) >= min(keep, len(fitting))
    if fitting:
        b = blended(evals, prices, w)
        assert max(b, key=lambda n: b[n]) in out or max(b.values()) in {b[n] for n in out}
        assert all(b[n] >= max(b.values()) - eps for n in out) or len(out) <= keep
        assert {n for n in fitting if b[n] >= max(b.values()) - eps} <= out  # all of them


def test_deciding_passes_the_first_of_the_best() -> None:
    # "b" and "c" tie at the top: the first in candidate order passes alone; an order
    # with "c" first passes "c" (the scheduler's candidate order breaks the tie)
    evals = {"a": ev(0.2), "b": ev(1.0), "c": ev(1.0), "x": ev(9.0, fits=False)}
    prices = dict.fromkeys(evals, 1.0)
    w = Weights(1.0, 0.0)
    assert narrow(evals, prices, w, decide=True) == {"b"}
    flipped = {n: evals[n] for n in ("c", "a", "b", "x")}
    assert narrow(flipped, prices, w, decide=True) == {"c"}
    assert narrow({"x": ev(1.0, fits=False)}, prices, w, decide=True) == set()
    assert narrow({}, prices, w, decide=True) == set()


@given(raws, st.floats(0.1, 3), st.floats(0, 3))
def test_deciding_passes_one_node_of_the_narrowed_set(spec, wp, wc) -> None:
    evals = {n: ev(raw, fits) for n, (fits, raw, _) in spec.items()}
    prices = {n: p for n, (_, _, p) in spec.items()}
    w = Weights(wp, wc)
    out = narrow(evals, prices, w, decide=True)
    fitting = [n for n, e in evals.items() if e.fits]
    assert len(out) == min(1, len(fitting))
    if fitting:
        b = blended(evals, prices, w)
        top = max(b.values())
        assert out == {next(n for n in fitting if b[n] == top)}
        assert out <= narrow(evals, prices, w, epsilon=0.0)


@given(raws, st.floats(0.1, 3), st.floats(0, 3))
def test_blended_is_priorities_before_rounding(spec, wp, wc) -> None:
    evals = {n: ev(raw, fits) for n, (fits, raw, _) in spec.items()}
    prices = {n: p for n, (_, _, p) in spec.items()}
    w = Weights(wp, wc)
    b = blended(evals, prices, w)
    scores = priorities(evals, prices, w)
    for n, e in evals.items():
        expect = max(0, min(10, round(10 * b[n]))) if e.fits else 0
        assert scores[n] == expect
