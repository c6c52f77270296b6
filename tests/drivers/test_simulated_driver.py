"""The simulated driver: spec parsing, determinism, memory accounting, drift bounds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drivers.gpu.simulated import DRIFT_BOUND, SimulatedDriver, SimulatedOutOfMemory
from drivers.gpu.spec import GpuSpec, parse_gpu_spec
from extender.wire.clock import ManualClock

# --- spec parser ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4xA10G:24Gi", [GpuSpec("A10G", 24 * 1024)] * 4),
        ("8xH100:80Gi", [GpuSpec("H100", 80 * 1024)] * 8),
        ("1xL4:23034Mi", [GpuSpec("L4", 23034)]),
        ("2xT4:16G", [GpuSpec("T4", 16 * 1000**3 // 1024**2)] * 2),  # decimal G, floored MiB
        ("A100-SXM4:40Gi", [GpuSpec("A100-SXM4", 40 * 1024)]),  # count defaults to 1
        (
            " 2 x H100 SXM : 80Gi , 1xL4:24Gi ",
            [GpuSpec("H100 SXM", 81920)] * 2 + [GpuSpec("L4", 24576)],
        ),
        ("1xB200:1.5Ti", [GpuSpec("B200", int(1.5 * 1024 * 1024))]),
    ],
)
def test_parse_gpu_spec(text: str, expected: list[GpuSpec]) -> None:
    assert parse_gpu_spec(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty GPU spec"),
        ("4xA10G", "bad GPU spec '4xA10G'"),
        ("4xA10G:24", "no unit"),
        ("4xA10G:24GB", "unit 'GB'"),
        ("0xA10G:24Gi", "at least 1"),
        ("4xA10G:0Mi", "at least 1Mi"),
        ("4xA10G:24Gi,", "bad GPU spec ''"),
        ("65xH100:80Gi", "at most 64"),
        ("4x:24Gi", "bad GPU spec"),
    ],
)
def test_parse_gpu_spec_rejects_bad_input_clearly(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_gpu_spec(text)
    assert message in str(info.value)


# --- determinism ---------------------------------------------------------------


def _scenario(seed: int, node: str) -> tuple[list[str], list[int], list[list[int | None]]]:
    sim = SimulatedDriver("2xA10G:24Gi", seed=seed, node=node, clock=ManualClock())
    pids = [sim.start_process(f"pod-{i}", sim.gpu_uuids[i % 2], 1000 + 100 * i) for i in range(4)]
    usage = []
    for _ in range(5):
        sim.step()
        usage.append([p.used_mib for d in sim.sample() for p in d.processes])
    return sim.gpu_uuids, pids, usage


def test_same_seed_and_node_replays_exactly() -> None:
    assert _scenario(7, "node-a") == _scenario(7, "node-a")


def test_seed_and_node_change_identities() -> None:
    uuids, pids, _ = _scenario(7, "node-a")
    assert _scenario(8, "node-a")[0] != uuids
    assert _scenario(7, "node-b")[0] != uuids
    assert len(set(uuids)) == 2 and all(u.startswith("GPU-") for u in uuids)
    assert len(set(pids)) == 4


# --- memory accounting ---------------------------------------------------------


def test_device_used_is_processes_plus_driver_reserve() -> None:
    sim = SimulatedDriver("1xH100:80Gi", reserve_mib=300)
    gpu = sim.gpu_uuids[0]
    sim.start_process("a", gpu, 10_000, sm_util=30.0)
    sim.start_process("b", gpu, 5_000, sm_util=20.0)
    (dev,) = sim.sample()
    assert dev.memory_used_mib == 300 + 15_000
    assert dev.memory_free_mib == 81920 - 15_300
    assert dev.utilization_gpu == 50.0
    assert dev.health.healthy


def test_set_usage_end_pod_and_attribution() -> None:
    sim = SimulatedDriver("1xA10G:24Gi", reserve_mib=0)
    gpu = sim.gpu_uuids[0]
    a1 = sim.start_process("pod-a", gpu, 1000, container_id="c" * 64)
    a2 = sim.start_process("pod-a", gpu, 2000)
    b = sim.start_process("pod-b", gpu, 3000)
    sim.set_usage(a1, 4000)
    assert sim.sample()[0].memory_used_mib == 9000
    assert sim.attribute(a1).pod_uid == "pod-a" and sim.attribute(a1).container_id == "c" * 64
    assert sim.end_pod("pod-a") == 2
    assert sim.processes_of("pod-a") == []
    assert sim.attribute(a2).reason == "process gone"
    assert [p.pid for p in sim.sample()[0].processes] == [b]


def test_out_of_memory_is_refused_like_cuda_malloc() -> None:
    sim = SimulatedDriver("1xL4:24Gi", reserve_mib=256)
    gpu = sim.gpu_uuids[0]
    pid = sim.start_process("a", gpu, 24 * 1024 - 256)
    with pytest.raises(SimulatedOutOfMemory):
        sim.start_process("b", gpu, 1)
    with pytest.raises(SimulatedOutOfMemory):
        sim.set_usage(pid, 24 * 1024)
    sim.set_usage(pid, 100)  # freeing always works
    assert sim.sample()[0].memory_used_mib == 356


def test_unknown_gpu_and_pid_are_errors() -> None:
    sim = SimulatedDriver("1xL4:24Gi")
    with pytest.raises(ValueError, match="unknown simulated GPU"):
        sim.start_process("a", "GPU-nope", 1)
    with pytest.raises(ValueError, match="no simulated process"):
        sim.set_usage(1, 1)


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    sizes=st.lists(st.integers(0, 4000), min_size=1, max_size=6),  # fits: 6 x 4000 + 256
    steps=st.integers(1, 40),
)
def test_drift_stays_within_bounds_and_capacity(seed: int, sizes: list[int], steps: int) -> None:
    sim = SimulatedDriver("1xA10G:24Gi", seed=seed, drift=0.3)
    gpu = sim.gpu_uuids[0]
    pids = {sim.start_process(f"p{i}", gpu, s): s for i, s in enumerate(sizes)}
    for _ in range(steps):
        sim.step()
        (dev,) = sim.sample()
        assert dev.memory_used_mib <= dev.memory_total_mib
        for p in dev.processes:
            base = pids[p.pid]
            assert p.used_mib is not None
            assert int(base * (1 - DRIFT_BOUND)) <= p.used_mib <= int(base * (1 + DRIFT_BOUND))
