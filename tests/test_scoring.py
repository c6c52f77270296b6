"""Each policy's choice and score against its stated formula, on hand-worked cases."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import extender.scoring
from extender.scoring import Context, GpuView, Limits, NodeView, Weights, evaluate, priorities
from extender.scoring.batch import GpuBatch
from extender.scoring.cost import cost_terms
from extender.scoring.fragmentation import fragmentation_of
from extender.scoring.model import MAX_PRIORITY
from extender.scoring.policies import Binpack, Fgd, Spread, policy_by_name
from extender.state.demand import CapacityPref, GpuDemand
from extender.wire import protocol
from tests.fragmentation_reference import fragmentation, node_state, task_fragment

GIB = 1024
EXACT = Limits(margin_mib=0, idle_mib=0)
MIX = (((1, 8 * GIB, ""), 0.5), ((1, None, ""), 0.5))


def two_gpu_node(used1: int = 16 * GIB, capacity: str = "on-demand") -> NodeView:
    """GPU0 idle (24 GiB free); GPU1 with ``used1`` MiB taken by a running pod."""
    return NodeView(
        name="n",
        gpus=(
            GpuView("GPU-0", 0, "A10G", 24 * GIB, 0),
            GpuView("GPU-1", 1, "A10G", 24 * GIB, used1, reserved_mib=used1),
        ),
        capacity_type=capacity,
    )


def test_fgd_fragmentation_worked_by_hand() -> None:
    # state: GPU0 free 24 GiB idle, GPU1 free 8 GiB busy
    state = [(24 * GIB, True), (8 * GIB, False)]
    assert task_fragment(state, (1, 8 * GIB, "")) == 0  # both GPUs can take 8 GiB
    assert (
        task_fragment(state, (1, None, "")) == 8 * GIB
    )  # GPU1's 8 GiB is useless to a whole-GPU pod
    assert fragmentation(state, MIX) == 4 * GIB
    # a 16 GiB pod cannot use GPU1 at all, and needs 1 GPU: GPU0 suffices
    assert task_fragment(state, (1, 16 * GIB, "")) == 8 * GIB
    # two whole GPUs cannot fit: all free memory is fragment
    assert task_fragment(state, (2, None, "")) == 32 * GIB
    # the kernel (the one definition) on the same node: GPU0 idle, GPU1 with 8 GiB free
    node = two_gpu_node()
    assert node_state(node, EXACT)[0] == state
    batch = GpuBatch.from_views([node], EXACT)
    for mix, want in [
        (MIX, 4 * GIB),
        ((((1, 16 * GIB, ""), 1.0),), 8 * GIB),
        ((((2, None, ""), 1.0),), 32 * GIB),
        ((((1, None, "2g.20gb"), 1.0),), 0),
    ]:
        assert fragmentation_of(batch, EXACT, mix).tolist() == [want]


def test_fgd_places_where_fragmentation_shrinks() -> None:
    node = two_gpu_node()
    ctx = Context(limits=EXACT, mix=MIX)
    ev = evaluate(node, GpuDemand(1, 8 * GIB), Fgd(), ctx)
    # on GPU1: F goes 4096 -> 0 (dF = -4 GiB); on GPU0 it would go to 12 GiB (dF = +8 GiB)
    assert [g.uuid for g in ev.chosen] == ["GPU-1"]
    assert ev.raw == pytest.approx(4.0)


def test_binpack_best_fit_and_formula() -> None:
    node = two_gpu_node()
    ev = evaluate(node, GpuDemand(1, 8 * GIB), Binpack(), Context(limits=EXACT))
    assert [g.uuid for g in ev.chosen] == ["GPU-1"]
    # chosen fill after = 24/24, node fill after = 24/48 -> 0.5*1 + 0.5*0.5
    assert ev.raw == pytest.approx(0.75)


def test_spread_worst_fit_and_formula() -> None:
    node = two_gpu_node()
    ev = evaluate(node, GpuDemand(1, 8 * GIB), Spread(), Context(limits=EXACT))
    assert [g.uuid for g in ev.chosen] == ["GPU-0"]
    assert ev.raw == pytest.approx(1 - 24 / 48)


def test_whole_gpu_needs_idle_gpu_and_margin_counts() -> None:
    node = two_gpu_node()
    assert [g.uuid for g in evaluate(node, GpuDemand(1), Binpack(), Context(EXACT)).chosen] == [
        "GPU-0"
    ]
    ev = evaluate(node, GpuDemand(2), Binpack(), Context(EXACT))
    assert not ev.fits and ev.reason.startswith("1 idle GPU(s) < 2 whole GPU(s) asked")
    assert not ev.unresolvable  # preempting GPU1's pod would help
    # 8 GiB free on GPU1, but a 1 GiB safety margin leaves 7: an 8 GiB ask needs GPU0
    ev = evaluate(
        node, GpuDemand(1, 8 * GIB), Binpack(), Context(Limits(margin_mib=GIB, idle_mib=0))
    )
    assert [g.uuid for g in ev.chosen] == ["GPU-0"]


def test_memory_larger_than_any_gpu_is_unresolvable_with_reason() -> None:
    ev = evaluate(two_gpu_node(), GpuDemand(1, 30 * GIB), Binpack(), Context(EXACT))
    assert not ev.fits and ev.unresolvable
    assert "24.0 GiB free < 30.0 GiB" in ev.reason


def test_capacity_type_rules() -> None:
    spot = two_gpu_node(capacity="spot")
    on_demand_only = GpuDemand(1, 4 * GIB, capacity=CapacityPref.ON_DEMAND)
    ev = evaluate(spot, on_demand_only, Binpack(), Context(EXACT))
    assert not ev.fits and ev.unresolvable and "spot" in ev.reason
    spot_only = GpuDemand(1, 4 * GIB, capacity=CapacityPref.SPOT)
    assert not evaluate(two_gpu_node(), spot_only, Binpack(), Context(EXACT)).fits
    assert evaluate(spot, spot_only, Binpack(), Context(EXACT)).fits


def test_mig_profile_demand() -> None:
    node = NodeView(
        "m",
        (
            GpuView("MIG-a", 0, "A100", 10 * GIB, 0, mig_profile="1g.10gb"),
            GpuView("MIG-b", 0, "A100", 20 * GIB, 0, mig_profile="2g.20gb"),
        ),
    )
    ev = evaluate(node, GpuDemand(1, mig_profile="2g.20gb"), Fgd(), Context(EXACT))
    assert [g.uuid for g in ev.chosen] == ["MIG-b"]
    assert not evaluate(node, GpuDemand(1, 4 * GIB), Fgd(), Context(EXACT)).fits


def test_priorities_are_integers_0_to_10_and_blend_cost() -> None:
    ok = evaluate(two_gpu_node(), GpuDemand(1, 8 * GIB), Binpack(), Context(EXACT))
    worse = evaluate(two_gpu_node(used1=0), GpuDemand(1, 8 * GIB), Binpack(), Context(EXACT))
    no = evaluate(two_gpu_node(), GpuDemand(4), Binpack(), Context(EXACT))
    evals = {"best": ok, "worse": worse, "nofit": no}
    # policy only
    assert priorities(evals, {}, Weights(1, 0)) == {"best": 10, "worse": 0, "nofit": 0}
    # cost only: the cheaper node wins whatever the policy says
    prices = {"best": 0.05, "worse": 0.02, "nofit": 0.01}
    assert priorities(evals, prices, Weights(0.0001, 1)) == {"best": 0, "worse": 10, "nofit": 0}
    # equal weights: 0.5 each
    assert priorities(evals, prices, Weights(1, 1)) == {"best": 5, "worse": 5, "nofit": 0}


def test_cost_terms() -> None:
    assert cost_terms({"a": 1.0, "b": 3.0, "c": None}) == {"a": 1.0, "b": 0.0, "c": 0.5}
    assert cost_terms({"a": 2.0, "b": 2.0}) == {"a": 1.0, "b": 1.0}


def test_unknown_policy_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown policy 'best'.*binpack"):
        policy_by_name("best")


gpus_st = st.lists(
    st.tuples(st.integers(1, 96), st.integers(0, 96), st.integers(0, 96)), min_size=1, max_size=8
)


@given(
    gpus=gpus_st,
    ask=st.integers(1, 96),
    count=st.integers(1, 4),
    policy=st.sampled_from(["binpack", "spread", "fgd"]),
    margin=st.integers(0, 2),
)
def test_no_placement_exceeds_headroom(
    gpus: list[tuple[int, int, int]], ask: int, count: int, policy: str, margin: int
) -> None:
    """Property: whatever the node, a chosen GPU always has headroom >= the ask."""
    views = tuple(
        GpuView(f"G{i}", i, "X", total * GIB, max(used, reserved) * GIB, reserved * GIB)
        for i, (total, used, reserved) in enumerate(gpus)
    )
    node = NodeView("n", views)
    limits = Limits(margin_mib=margin * GIB, idle_mib=0)
    ev = evaluate(node, GpuDemand(count, ask * GIB), policy_by_name(policy), Context(limits, MIX))
    if ev.fits:
        assert len({g.uuid for g in ev.chosen}) == count
        for g in ev.chosen:
            assert g.total_mib - g.committed_mib - limits.margin_mib >= ask * GIB
    else:
        ok = [g for g in views if g.total_mib - g.committed_mib - limits.margin_mib >= ask * GIB]
        assert len(ok) < count


@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.25, 0.35, 0.45, 0.5, 0.65, 1.0]),
            st.booleans(),
            st.sampled_from([None, 1.0, 2.0, 3.0, 1.5]),
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from([(1.0, 0.0), (0.0, 1.0), (1.0, 1.0), (2.0, 0.5), (0.5, 3.0)]),
)
def test_integer_priorities_round_ten_times_the_blend_half_to_even(
    nodes: list[tuple[float, bool, float | None]], w: tuple[float, float]
) -> None:
    """The compiled kernel gives round(10 x b(n)) as Python rounds (2.5 -> 2, 3.5 -> 4),
    clipped to 0..10, 0 where the node does not fit: exactly the NumPy formula."""
    import numpy as np

    from extender.scoring.framework import blended_array, priority_array

    raw = np.array([r for r, _, _ in nodes])
    fits = np.array([f for _, f, _ in nodes])
    prices = np.array([np.nan if p is None else p for _, _, p in nodes])
    weights = Weights(*w)
    b = blended_array(raw, fits, prices, weights)
    expected = [
        int(min(max(round(10 * v), 0), 10)) if ok else 0
        for v, ok in zip(b.tolist(), fits.tolist(), strict=True)
    ]
    assert priority_array(raw, fits, prices, weights).tolist() == expected


def test_integer_priorities_on_exact_halves() -> None:
    import numpy as np

    from extender.scoring.framework import priority_array

    raw = np.array([0.0, 0.25, 0.45, 0.75, 1.0, 0.5])
    fits = np.array([True, True, True, True, True, False])
    scores = priority_array(raw, fits, np.full(6, np.nan), Weights(1.0, 0.0))
    assert scores.tolist() == [0, 2, 4, 8, 10, 0]  # 2.5 -> 2, 4.5 -> 4, 7.5 -> 8


def test_scoring_stands_on_plain_data_only() -> None:
    """``extender.scoring`` imports nothing of the project but itself (its model types):
    no wire protocol, no cluster state. Its priority range is the protocol's."""
    root, scoring = Path(extender.scoring.__file__).parent, "extender.scoring"
    outside: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            project = [n for n in names if n.split(".")[0] in ("extender", "drivers")]
            outside.update(f"{path.name}: {n}" for n in project if not n.startswith(scoring))
    assert not outside
    assert MAX_PRIORITY == protocol.MAX_PRIORITY
