"""The trial placements of 4- and 8-GPU nodes in AVX2 lanes (``lanes.h``) give the very
bits of the scalar loop (``node.h``'s ``evaluate_n``), which stays the definition and
runs where the CPU has no AVX2.

The reference tests (tests/test_batch_scoring.py, tests/test_kernel.py) run with the
lanes on wherever the CPU has them; here the two ways are compared with each other on
nodes where they differ most: every slot count the lanes take (4 and 8, padded slots of
smaller nodes among them), whole-GPU and multi-GPU shapes, slots left exactly empty by a
unit, busy and reserved GPUs, host room that runs out."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.scoring import kernel
from extender.scoring.batch import GpuBatch
from extender.scoring.fragmentation import _scores
from extender.scoring.model import CapacityPref, GpuDemand, GpuView, Limits, NodeView, Shape


def cpu_has_avx2() -> bool:
    """Read as an operator would: the flags the kernel reports for this machine."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():  # not Linux: what the kernel decides is not read here
        return False
    flags = cpuinfo.read_text()
    return any(line.startswith("flags") and " avx2" in line for line in flags.splitlines())


AVX2 = cpu_has_avx2()
needs_avx2 = pytest.mark.skipif(not AVX2, reason="the lanes need a CPU with AVX2")
LIM = Limits(margin_mib=512)


@pytest.fixture(autouse=True)
def lanes_restored() -> Iterator[None]:
    yield
    kernel.lanes(True)


def test_the_lanes_are_used_exactly_where_the_cpu_has_avx2() -> None:
    assert kernel.lanes(True) is AVX2
    assert kernel.lanes(False) is False
    assert kernel.lanes(True) is AVX2


USED = [0, 0, 300, 2048, 7680, 12_000, 24_064, 24_576]  # a 24,576 MiB GPU: 24,064 is full
RESERVED = [0, 0, 0, 1024, 24_576]
SIZES = [24_576, 24_576, 16_384, 46_080]


@st.composite
def nodes(draw: st.DrawFn, slots: int) -> list[NodeView]:
    """Nodes of ``slots`` GPUs, and some of fewer (their missing slots are padding)."""
    out = []
    for i in range(draw(st.integers(1, 40))):
        count = slots if draw(st.booleans()) else draw(st.integers(1, slots))
        gpus = []
        for j in range(count):
            used, reserved = draw(st.sampled_from(USED)), draw(st.sampled_from(RESERVED))
            size = draw(st.sampled_from(SIZES))  # GPUs of a node may differ
            used, reserved = min(used, size), min(reserved, size)
            gpus.append(GpuView(f"n{i}-{j}", j, "X", size, max(used, reserved), reserved, ""))
        cpu = draw(st.sampled_from([0, 16_000]))
        out.append(
            NodeView(
                f"n{i}",
                tuple(gpus),
                draw(st.sampled_from(["spot", "on-demand"])),
                "g5.12xlarge",
                0.01,
                version=1,
                cpu_allocatable_milli=cpu,
                cpu_requested_milli=draw(st.sampled_from([0, 8000, cpu])),
                memory_allocatable_mib=65_536,
                memory_requested_mib=draw(st.sampled_from([0, 60_000])),
            )
        )
    return out


# an empty GPU has 24,064 MiB of headroom (512 margin): a 24,064 unit leaves it exactly
# empty, a 12,288 one leaves exactly 11,776, the boundary of hosting one more of those
MEMS = [None, 1536, 4096, 11_776, 12_288, 16_000, 24_064]
demands = st.builds(
    GpuDemand,
    count=st.integers(1, 3),
    memory_mib=st.sampled_from(MEMS),
    capacity=st.sampled_from(list(CapacityPref)),
    cpu_milli=st.sampled_from([0, 2000]),
    host_memory_mib=st.sampled_from([0, 8192]),
)
mixes = st.lists(
    st.tuples(
        st.builds(
            Shape,
            st.integers(1, 3),
            st.sampled_from(MEMS),
            st.just(""),
            st.sampled_from([0, 4000, 12_000, 15_000]),  # 15,000: room before, none after
            st.sampled_from([0, 16_384]),
        ),
        st.floats(0.05, 1.0),
    ),
    min_size=1,
    max_size=8,
)


def scored(b: GpuBatch, demand: GpuDemand, mix: tuple, lanes: bool) -> tuple:
    kernel.lanes(lanes)
    rows = np.arange(len(b), dtype=np.int64)
    return _scores(b, rows, demand, LIM, mix, True, 0.3, 1.0, None)


@needs_avx2
@settings(max_examples=400, deadline=None)
@given(data=st.data(), slots=st.sampled_from([4, 8]), demand=demands, mix=mixes)
def test_the_lanes_give_the_scalar_loops_bits(
    data: st.DataObject, slots: int, demand: GpuDemand, mix: list[tuple[Shape, float]]
) -> None:
    views = data.draw(nodes(slots))
    total = sum(p for _, p in mix)
    shares = tuple((s, p / total) for s, p in mix)
    b = GpuBatch.from_views(views, LIM)
    assert b.size()[0] == slots or max(len(v.gpus) for v in views) < slots
    lanes, scalar = scored(b, demand, shares, True), scored(b, demand, shares, False)
    for x, y in zip(lanes, scalar, strict=True):
        assert x.tobytes() == y.tobytes(), (x, y)


@needs_avx2
def test_a_fleet_of_every_node_its_own_state_scores_alike_both_ways() -> None:
    """The case the lanes are for: thousands of 4-GPU nodes, each placed (no two equal)."""
    views = []
    for i in range(3000):
        used = [256 + i, 2048 * (i % 4), (i * 37) % 20_000, 24_064 if i % 7 == 0 else 0]
        gpus = tuple(GpuView(f"n{i}-{j}", j, "A10G", 24_576, u, 0, "") for j, u in enumerate(used))
        views.append(NodeView(f"n{i}", gpus, "on-demand", "g5.12xlarge", 0.01, version=1))
    b = GpuBatch.from_views(views, LIM)
    mix = (*((Shape(1 + k % 2, 2048 + 1500 * k), 1 / 8) for k in range(7)), (Shape(1, None), 1 / 8))
    for demand in (GpuDemand(1, 3000), GpuDemand(2, 9000), GpuDemand(1, None)):
        lanes, scalar = scored(b, demand, mix, True), scored(b, demand, mix, False)
        assert lanes[0].sum() > 1000  # real scores compared, not a fleet where nothing fits
        assert all(x.tobytes() == y.tobytes() for x, y in zip(lanes, scalar, strict=True))


@needs_avx2
def test_each_slot_takes_its_own_unit() -> None:
    """A whole-GPU pod's unit is each GPU's own size: on a node of mixed GPUs, a lane
    given another slot's unit scores it otherwise (-7.32 against 0.18, found in review)."""
    sizes = [16_384, 46_080, 24_576, 46_080]
    gpus = tuple(
        GpuView(f"n-{j}", j, "X", t, 2048 if j == 0 else 0, 0, "") for j, t in enumerate(sizes)
    )
    b = GpuBatch.from_views([NodeView("n", gpus, "on-demand", "p", 0.01, version=1)], LIM)
    mix = ((Shape(1, None), 0.3), (Shape(1, 20_000), 0.7))
    lanes, scalar = (scored(b, GpuDemand(1, None), mix, on) for on in (True, False))
    assert bool(scalar[0][0])
    assert all(x.tobytes() == y.tobytes() for x, y in zip(lanes, scalar, strict=True))
