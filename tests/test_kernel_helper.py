"""The scoring kernel's long passes shared with a helper thread (``pass.h``'s
``score_chunks``, ``helper.h``): the answers are the very bits the caller alone computes,
whichever thread took which rows, and a forked child gets a helper of its own.

The helper takes part only when it wakes in time and has a CPU, so each test repeats
the pass until ``kernel.helped()`` says it scored rows; with one CPU to run on (affinity,
or a container's CPU limit under two) no helper is started and those tests are skipped."""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.connection import Connection
from pathlib import Path

import msgspec
import numpy as np
import pytest

from extender.scoring import kernel
from extender.scoring.batch import GpuBatch
from extender.scoring.fragmentation import _scores
from extender.scoring.model import CapacityPref, GpuDemand, GpuView, Limits, NodeView, Shape
from tests.support import running_extender


def cpu_limit() -> float:
    """The container's CPU limit in CPUs (cgroup v2 cpu.max, else v1's CFS quota), 0 for
    none: read here as an operator would, to say what the kernel should decide."""
    v2 = Path("/sys/fs/cgroup/cpu.max")
    if v2.exists():
        quota, period = v2.read_text().split()
        return 0.0 if quota == "max" else int(quota) / int(period)
    v1 = Path("/sys/fs/cgroup/cpu")
    try:
        cfs_quota = int((v1 / "cpu.cfs_quota_us").read_text())
        cfs_period = int((v1 / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return 0.0
    return cfs_quota / cfs_period if cfs_quota > 0 and cfs_period > 0 else 0.0


TWO_CPUS = len(os.sched_getaffinity(0)) >= 2 and not 0 < cpu_limit() < 2
two_cpus = pytest.mark.skipif(not TWO_CPUS, reason="the helper thread needs a second CPU")

LIM = Limits()
# seven shapes of one or two GPUs and growing memory, and a whole GPU
MIX = (*((Shape(1 + k % 2, 2048 + 1500 * k), 1 / 8) for k in range(7)), (Shape(1, None), 1 / 8))
TRIES = 300  # passes until the helper has taken part (it does within a few on two CPUs)


def fleet(n: int) -> GpuBatch:
    """n nodes: most in states of their own, every fifth one of a few shared states (the
    pass copies those within each thread), some spot, some short of host CPU. A pass is
    shared from 2,048 placements: ~0.8 n, so from ~2,600 nodes."""
    return GpuBatch.from_views(views(n), LIM)


def views(n: int) -> list[NodeView]:
    """``fleet``'s nodes."""
    views = []
    for i in range(n):
        used = [0, 0, 0, 0] if i % 5 == 0 else [256 + i, 2048 * (i % 4), (i * 37) % 20_000, 0]
        gpus = tuple(GpuView(f"n{i}-{j}", j, "A10G", 24_576, u, 0, "") for j, u in enumerate(used))
        views.append(
            NodeView(
                f"n{i}",
                gpus,
                "spot" if i % 3 == 0 else "on-demand",
                "g5.12xlarge",
                0.01,
                version=1,
                cpu_allocatable_milli=16_000,
                cpu_requested_milli=15_900 if i % 11 == 0 else 1000,
            )
        )
    return views


DEMANDS = [
    GpuDemand(count=1, memory_mib=3000, cpu_milli=500),
    GpuDemand(count=2, memory_mib=9000, capacity=CapacityPref.ON_DEMAND),
    GpuDemand(count=1, memory_mib=None),  # a whole GPU
]


def rows_of(n: int) -> np.ndarray:
    """Every row in a shuffled order, and unknown nodes (-1) among them."""
    rows = np.random.default_rng(3).permutation(n).astype(np.int64)
    rows[::97] = -1
    return rows


def alone_and_shared(b: GpuBatch, rows: np.ndarray, demand: GpuDemand) -> tuple[tuple, tuple]:
    """The pass by the caller alone, then shared until the helper scored some of it."""

    def scored() -> tuple:
        return _scores(b, rows, demand, LIM, MIX, True, 0.3, 1.0, None)

    kernel.share(False)
    try:
        alone = scored()
    finally:
        kernel.share(True)
    kernel.helped()
    for _ in range(TRIES):
        shared = scored()
        if kernel.helped():
            return alone, shared
    pytest.fail(f"the helper took no row in {TRIES} passes on {os.sched_getaffinity(0)}")


def rows_helped(b: GpuBatch, rows: np.ndarray, passes: int = 20) -> int:
    """Rows the helper scored in ``passes`` passes over ``rows`` (0: never shared)."""
    kernel.helped()
    for _ in range(passes):
        _scores(b, rows, DEMANDS[0], LIM, MIX, True, 0.3, 1.0, None)
    return kernel.helped()


def same_bits(a: tuple, b: tuple) -> bool:
    return all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))


@two_cpus
@pytest.mark.parametrize("demand", DEMANDS, ids=["one GPU", "two on-demand", "whole GPU"])
def test_a_shared_pass_gives_the_bits_the_caller_alone_gives(demand: GpuDemand) -> None:
    b = fleet(4000)
    alone, shared = alone_and_shared(b, rows_of(len(b)), demand)
    assert alone[0].sum() > 1000  # most nodes fit: the answers compared are real scores
    assert same_bits(alone, shared)


@two_cpus
def test_a_pass_too_short_to_share_is_the_callers() -> None:
    b = fleet(2000)  # under the 2,048 placements from which a pass is shared
    assert rows_helped(b, rows_of(len(b))) == 0


def distinct(n: int) -> list[NodeView]:
    """n nodes, each in a state of its own (one GPU's usage tells them apart)."""
    return [
        NodeView(f"d{i}", (GpuView(f"d{i}-0", 0, "A10G", 24_576, 256 + i),), "on-demand")
        for i in range(n)
    ]


@two_cpus
def test_a_pass_is_shared_from_2048_placements() -> None:
    """2,048 rows in 2,048 states are shared; 2,048 rows in 2,047 (two nodes alike) are
    not: the threshold counts placements, and counts them exactly."""
    at = GpuBatch.from_views(distinct(2048), LIM)
    alone_and_shared(at, np.arange(2048, dtype=np.int64), DEMANDS[0])
    under = distinct(2047)
    below = GpuBatch.from_views([*under, msgspec.structs.replace(under[0], name="twin")], LIM)
    assert rows_helped(below, np.arange(2048, dtype=np.int64)) == 0


@two_cpus
def test_many_rows_in_few_states_are_a_short_pass() -> None:
    """6,000 rows in 300 states place the pod 300 times and copy the rest: too little
    to share (the helper's wake-up cost more than it saved on such fleets); the same
    rows each in a state of its own are shared."""
    few = GpuBatch.from_views(
        [msgspec.structs.replace(v, name=f"m{i}") for i, v in enumerate(views(300) * 20)],
        LIM,
    )
    assert rows_helped(few, rows_of(len(few))) == 0
    alone_and_shared(fleet(6000), rows_of(6000), DEMANDS[0])  # fails if never shared


def _child(conn: Connection) -> None:
    b = fleet(3000)
    alone, shared = alone_and_shared(b, rows_of(len(b)), DEMANDS[0])
    conn.send(same_bits(alone, shared))


@two_cpus
def test_a_forked_child_scores_with_a_helper_of_its_own() -> None:
    """A child forked after the parent's helper started has no helper thread; it starts
    its own, and its shared passes give the same bits (a child that kept the parent's
    state would never be helped, or wait for a thread that does not exist)."""
    b = fleet(3000)
    alone_and_shared(b, rows_of(len(b)), DEMANDS[0])  # the parent's helper runs
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=_child, args=(theirs,))
    child.start()
    child.join(timeout=120)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung in a shared pass")
    assert child.exitcode == 0
    assert ours.poll() and ours.recv() is True


def test_a_helper_runs_where_there_is_a_second_cpu() -> None:
    """Two CPUs in the affinity mask and no CPU limit under two: the helper is started
    when sharing is turned on (not in the first filter); else it never is."""
    kernel.share(True)
    assert kernel.helping() is TWO_CPUS


def test_the_extender_shares_passes_as_its_settings_say(tmp_path: Path) -> None:
    """``HEADROOM_SCORING_HELPER=false`` (one CPU for the extender) turns the helper off;
    ``kernel.share`` answers what it was."""
    with running_extender(tmp_path, scoring_helper=False):
        assert kernel.share(True) is False
    with running_extender(tmp_path):
        assert kernel.share(True) is True
