"""The learned workload mix: follows arrivals, stays bounded, and changes version (which
throws away every cached evaluation) only when it really moved."""

from __future__ import annotations

from extender.state.demand import GpuDemand
from extender.state.workload import DEFAULT_MIX, WorkloadMix


def test_a_steady_workload_publishes_once() -> None:
    mix = WorkloadMix(publish_every=10)
    for _ in range(500):
        mix.observe(GpuDemand(1, 4096))
    assert mix.mix == (((1, 4096, ""), 1.0),)
    assert mix.version == 1  # later publications found nothing new


def test_a_new_shape_in_the_top_is_published() -> None:
    mix = WorkloadMix(publish_every=10)
    for _ in range(100):
        mix.observe(GpuDemand(1, 4096))
    before = mix.version
    for _ in range(100):
        mix.observe(GpuDemand(2, None))
    shares = dict(mix.mix)
    assert mix.version > before
    assert set(shares) == {(1, 4096, ""), (2, None, "")}
    assert abs(shares[(1, 4096, "")] - shares[(2, None, "")]) < 0.1


def test_ever_new_shapes_stay_bounded() -> None:
    mix = WorkloadMix(publish_every=10, top=8)
    for i in range(5_000):
        mix.observe(GpuDemand(1, 1024 + i))
    assert len(mix.mix) == 8
    assert len(mix._weights) <= 8 * 8 + 10  # pruned at every publication
    assert abs(sum(p for _, p in mix.mix) - 1.0) < 1e-9


def test_mig_and_dra_pods_do_not_count() -> None:
    mix = WorkloadMix()
    mix.observe(GpuDemand(1, mig_profile="1g.10gb"))
    mix.observe(GpuDemand(0, dra_claims=("c",)))
    assert mix.mix == DEFAULT_MIX and mix.version == 0


def test_shares_follow_the_decay_of_older_arrivals() -> None:
    """Each arrival weighs ``decay`` times the one after it: the published shares are
    those of the decayed weights, however they are kept."""
    mix = WorkloadMix(decay=0.9, publish_every=40, tolerance=0.0)
    shapes = [GpuDemand(1, 4096)] * 25 + [GpuDemand(2, None)] * 15  # the newer, fewer
    for demand in shapes:
        mix.observe(demand)
    weights: dict[tuple, float] = {}
    for age, demand in enumerate(reversed(shapes)):
        weights[demand.key] = weights.get(demand.key, 0.0) + 0.9**age
    total = sum(weights.values())
    assert {shape: round(p, 12) for shape, p in mix.mix} == {
        shape: round(w / total, 12) for shape, w in weights.items()
    }
    assert dict(mix.mix)[(2, None, "")] > 0.5  # decay favours the recent arrivals
