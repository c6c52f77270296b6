"""The learned workload mix: follows arrivals, stays bounded, and changes version (which
throws away every cached evaluation) only when it really moved."""

from __future__ import annotations

from extender.scoring.model import Shape
from extender.state.demand import GpuDemand
from extender.state.workload import DEFAULT_MIX, WorkloadMix, mix_of, typical


def test_a_steady_workload_publishes_once() -> None:
    mix = WorkloadMix(publish_every=10)
    for _ in range(500):
        mix.observe(GpuDemand(1, 4096))
    assert mix.mix == ((Shape(1, 4096), 1.0),)
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
    assert set(shares) == {Shape(1, 4096), Shape(2, None)}
    assert abs(shares[Shape(1, 4096)] - shares[Shape(2, None)]) < 0.1


def test_ever_new_shapes_stay_bounded() -> None:
    mix = WorkloadMix(publish_every=10, top=8)
    for i in range(5_000):
        mix.observe(GpuDemand(1, 1024 + i))
    assert len(mix.mix) == 8
    assert len(mix._tallies) <= 8 * 8 + 10  # pruned at every publication
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
    assert dict(mix.mix)[Shape(2, None)] > 0.5  # decay favours the recent arrivals


def test_the_mix_records_what_a_shape_needs_of_the_node() -> None:
    """FGD counts a GPU behind a node's exhausted CPU as fragmented for a shape that needs
    that CPU: each shape of the mix carries its pods' CPU and host memory, rounded to two
    significant bits. Allowed models are not part of a shape (module docstring)."""
    mix = WorkloadMix(publish_every=1)
    mix.observe(GpuDemand(1, None, cpu_milli=2_000, host_memory_mib=4000))
    mix.observe(GpuDemand(2, None, cpu_milli=16_000, models=frozenset({"NVIDIA-A10G"})))
    assert {shape for shape, _ in mix.mix} == {
        Shape(1, None, "", 2_048, 4096),
        Shape(2, None, "", 16_384, 0),
    }


def test_pods_alike_on_gpus_share_one_shape_at_their_mean_host_needs() -> None:
    """Continuous CPU requests must not make every pod its own shape: the top of the mix
    would then describe a sliver of the workload."""
    mix = WorkloadMix(decay=1.0, publish_every=1_000, top=2)
    for i in range(300):
        mix.observe(GpuDemand(1, 8192, cpu_milli=1_000 + 10 * i, host_memory_mib=2_000 + i))
    mix.observe(GpuDemand(2, None, cpu_milli=8_000))
    shapes = dict(mix_of([GpuDemand(1, 8192, cpu_milli=c) for c in (1_000, 3_000)]))
    assert shapes == {Shape(1, 8192, "", 2_048, 0): 1.0}  # mean 2,000m
    published = dict(mix.publish())
    assert published[Shape(1, 8192, "", typical(2_495), typical(2_149.5))] == 300 / 301
    assert typical(2_495) == 2_048 and typical(2_149.5) == 2_048


def test_typical_values_keep_two_significant_bits() -> None:
    assert [typical(v) for v in (0, 3, 5, 7, 100, 1_000, 1_500, 12_000, 40_000)] == [
        0,
        3,
        6,
        8,
        96,
        1_024,
        1_536,
        12_288,
        32_768,
    ]
