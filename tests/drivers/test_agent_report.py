"""build_report, per-pod usage, /metrics series and leak detection."""

from __future__ import annotations

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from drivers.agent.loop import Agent, build_report
from drivers.agent.metrics import AgentMetrics
from drivers.attribution.pods import Attribution
from drivers.gpu.base import GpuDevice, GpuProcess, Health, MigInstance
from drivers.gpu.simulated import SimulatedDriver
from extender.wire.clock import ManualClock
from extender.wire.report import (
    MAX_STRING,
    SCHEMA_V1,
    GpuReport,
    MigReport,
    NodeReport,
    PodGrant,
    ProcessReport,
    ReportResponse,
    report_decoder,
)
from extender.wire.usage import find_leaks, pod_usage, unattributed_mib

MiB = 1024 * 1024


def three_pods_on_one_gpu() -> tuple[SimulatedDriver, str, dict[str, int]]:
    sim = SimulatedDriver("2xA10G:24Gi", seed=3, node="n1", reserve_mib=256)
    gpu = sim.gpu_uuids[0]
    sizes = {"pod-a": 6000, "pod-b": 4000, "pod-c": 2500}
    for pod, mib in sizes.items():
        sim.start_process(pod, gpu, mib, sm_util=20.0)
    sim.start_process("pod-a", gpu, 500, sm_util=5.0)  # a second process of pod-a
    return sim, gpu, {**sizes, "pod-a": 6500}


def test_report_roundtrips_through_the_wire_schema() -> None:
    sim, _, _ = three_pods_on_one_gpu()
    clock = ManualClock(1_800_000_000.0)
    report = build_report(sim, "n1", sim.attribute, clock, labels={"zone": "a"})
    decoded = report_decoder.decode(msgspec.json.encode(report))
    assert decoded == report
    assert (report.node, report.sampled_at, report.schema) == ("n1", 1_800_000_000.0, SCHEMA_V1)
    assert (report.driver, report.driver_version, report.labels) == (
        "simulated",
        "simulated",
        {"zone": "a"},
    )
    assert [g.uuid for g in report.gpus] == sim.gpu_uuids
    assert len(report.gpus[0].processes) == 4 and report.gpus[1].processes == []
    assert all(p.pod_uid and p.container_id for p in report.gpus[0].processes)


def test_three_pods_sharing_a_gpu_sum_to_the_device_not_three_times() -> None:
    sim, gpu, sizes = three_pods_on_one_gpu()
    report = build_report(sim, "n1", sim.attribute, ManualClock())
    g = report.gpus[0]
    per_pod: dict[str, int] = {}
    for u in pod_usage(report):
        per_pod[u.pod_uid] = per_pod.get(u.pod_uid, 0) + u.used_mib
    assert per_pod == sizes
    assert sum(per_pod.values()) + unattributed_mib(g) == g.memory_used_mib
    assert unattributed_mib(g) == 256  # exactly the driver reserve

    metrics = AgentMetrics(CollectorRegistry())
    agent = Agent(sim, "n1", sim.attribute, ManualClock(), metrics=metrics)
    agent.sample()
    reg = metrics.registry
    series = {
        pod: reg.get_sample_value(
            "headroom_agent_pod_gpu_memory_used_bytes",
            {"pod_uid": pod, "namespace": "", "container": _cid(sim, pod), "gpu": gpu, "mig": ""},
        )
        for pod in ("pod-b", "pod-c")
    }
    assert series == {"pod-b": 4000 * MiB, "pod-c": 2500 * MiB}
    pod_total = sum(
        s.value
        for m in reg.collect()
        if m.name == "headroom_agent_pod_gpu_memory_used_bytes"
        for s in m.samples
        if s.labels["gpu"] == gpu
    )
    labels = {"gpu": gpu, "index": "0", "model": "A10G"}
    used = reg.get_sample_value("headroom_agent_gpu_memory_used_bytes", labels)
    unattributed = reg.get_sample_value("headroom_agent_gpu_memory_unattributed_bytes", labels)
    assert used is not None and unattributed is not None
    assert used == (sum(sizes.values()) + 256) * MiB
    assert pod_total + unattributed == used
    assert unattributed == 256 * MiB
    assert reg.get_sample_value("headroom_agent_gpu_utilization_ratio", labels) == pytest.approx(
        0.65
    )
    assert reg.get_sample_value("headroom_agent_gpu_healthy", labels) == 1.0


def _cid(sim: SimulatedDriver, pod: str) -> str:
    (pid,) = sim.processes_of(pod)
    cid = sim.attribute(pid).container_id
    assert cid is not None
    return cid


def test_ended_pods_disappear_from_metrics() -> None:
    sim, _, _ = three_pods_on_one_gpu()
    metrics = AgentMetrics(CollectorRegistry())
    agent = Agent(sim, "n1", sim.attribute, ManualClock(), metrics=metrics)
    agent.sample()
    sim.end_pod("pod-b")
    agent.sample()
    pods = {
        s.labels["pod_uid"]
        for m in metrics.registry.collect()
        if m.name == "headroom_agent_pod_gpu_memory_used_bytes"
        for s in m.samples
    }
    assert pods == {"pod-a", "pod-c"}


class FixedDriver:
    """A driver that returns hand-built devices (MIG, unhealthy, odd values)."""

    name = "fixed"

    def __init__(self, devices: list[GpuDevice]) -> None:
        self.devices = devices

    def driver_version(self) -> str | None:
        return None

    def sample(self) -> list[GpuDevice]:
        return self.devices

    def close(self) -> None:
        pass


def test_unmapped_processes_are_kept_with_their_reason() -> None:
    dev = GpuDevice(
        uuid="GPU-1", index=0, model="L4", memory_total_mib=23034, memory_used_mib=3000,
        memory_free_mib=20034, processes=(GpuProcess(1, 1000), GpuProcess(2, 1500),
                                          GpuProcess(3, None)),
    )  # fmt: skip
    table = {1: Attribution("pod-x", "c1"), 2: Attribution(reason="process gone")}

    def attribute(pid: int) -> Attribution:
        return table.get(pid, Attribution(reason="not a pod cgroup: /system.slice/x"))

    report = build_report(FixedDriver([dev]), "n1", attribute, ManualClock())
    procs = report.gpus[0].processes
    assert [(p.pid, p.pod_uid, p.unmapped_reason) for p in procs] == [
        (1, "pod-x", None),
        (2, None, "process gone"),
        (3, None, "not a pod cgroup: /system.slice/x"),
    ]
    assert unattributed_mib(report.gpus[0]) == 2000  # only pod-x's 1000 MiB is attributed
    assert report.driver_version is None


def test_mig_and_unhealthy_devices_in_the_report() -> None:
    mig = GpuDevice(
        uuid="GPU-m", index=0, model="A100", memory_total_mib=40960, memory_used_mib=1500,
        memory_free_mib=39460, mig_enabled=True,
        mig=(MigInstance("MIG-a", "1g.5gb", 4864, 1024, 7, 0, (GpuProcess(5, 1024),)),),
    )  # fmt: skip
    lost = GpuDevice(
        uuid="GPU-l", index=1, model="A100", memory_total_mib=40960, memory_used_mib=40960,
        memory_free_mib=0, health=Health(False, "nvmlDeviceGetMemoryInfo: " + "x" * 400),
    )  # fmt: skip
    report = build_report(
        FixedDriver([mig, lost]), "n1", lambda pid: Attribution("pod-m"), ManualClock()
    )
    m, bad = report.gpus
    assert m.mig_enabled and m.processes == [] and m.utilization_gpu is None
    assert m.mig[0].processes[0].pod_uid == "pod-m"
    assert (m.mig[0].gpu_instance_id, m.mig[0].compute_instance_id) == (7, 0)
    assert [(u.gpu_uuid, u.mig_uuid, u.used_mib) for u in pod_usage(report)] == [
        ("GPU-m", "MIG-a", 1024)
    ]
    assert not bad.healthy and bad.health_reason is not None
    assert len(bad.health_reason) <= MAX_STRING  # clipped to what the extender accepts


# --- leaks ----------------------------------------------------------------------------


def leak_report() -> NodeReport:
    def proc(pid: int, pod: str | None) -> ProcessReport:
        return ProcessReport(pid=pid, used_mib=100, pod_uid=pod)

    return NodeReport(
        node="n1",
        sampled_at=0.0,
        gpus=[
            GpuReport("GPU-0", 0, "H100", 81920, 1000, processes=[proc(1, "a"), proc(2, "b")]),
            GpuReport("GPU-1", 1, "H100", 81920, 1000, processes=[proc(3, "a"), proc(4, None)]),
            GpuReport(
                "GPU-2", 2, "A100", 40960, 1000, mig_enabled=True,
                mig=[MigReport("MIG-x", "1g.5gb", 4864, 100, processes=[proc(5, "c")]),
                     MigReport("MIG-y", "1g.5gb", 4864, 100, processes=[proc(6, "d")])],
            ),
        ],
    )  # fmt: skip


def test_find_leaks() -> None:
    grants = {"a": ["GPU-0"], "b": ["GPU-0"], "c": ["MIG-x"], "d": ["GPU-2"], "e": ["GPU-1"]}
    leaks = find_leaks(leak_report(), grants)
    # pod a also runs on GPU-1 (NVIDIA_VISIBLE_DEVICES=all); the unmapped pid 4 is no leak;
    # c is within its MIG grant, d within its parent-GPU grant.
    assert [(lk.pod_uid, lk.gpu_uuid, lk.pid, lk.kind, lk.granted) for lk in leaks] == [
        ("a", "GPU-1", 3, "wrong_gpu", ("GPU-0",))
    ]


def test_find_leaks_pods_without_grants() -> None:
    grants = [PodGrant("a", "ns", "pa", ["GPU-0", "GPU-1"], 1000)]
    leaks = find_leaks(leak_report(), grants)
    assert [(lk.pod_uid, lk.kind, lk.mig_uuid) for lk in leaks] == [
        ("b", "no_grant", None),
        ("c", "no_grant", "MIG-x"),
        ("d", "no_grant", "MIG-y"),
    ]
    assert find_leaks(leak_report(), grants, include_ungranted=False) == []


def test_agent_flags_leaks_only_after_the_extender_answered() -> None:
    sim = SimulatedDriver("2xH100:80Gi", node="n1")
    g0, g1 = sim.gpu_uuids
    sim.start_process("pod-a", g0, 1000)
    sim.start_process("pod-a", g1, 1000)  # sees both GPUs, was given one
    metrics = AgentMetrics(CollectorRegistry())
    agent = Agent(sim, "n1", sim.attribute, ManualClock(), metrics=metrics)
    agent.sample()
    assert agent.state.leaks == []  # no grants known yet: claim nothing
    agent.accept(
        ReportResponse(
            accepted=True,
            node="n1",
            received_at=0.0,
            grants=[PodGrant("pod-a", "ml", "trainer", [g0], 1000)],
        )
    )
    assert [(lk.pod_uid, lk.gpu_uuid) for lk in agent.state.leaks] == [("pod-a", g1)]
    value = metrics.registry.get_sample_value(
        "headroom_agent_leaked_processes",
        {"pod_uid": "pod-a", "namespace": "ml", "gpu": g1, "kind": "wrong_gpu"},
    )
    assert value == 1.0
    ns = metrics.registry.get_sample_value(
        "headroom_agent_pod_gpu_memory_used_bytes",
        {
            "pod_uid": "pod-a",
            "namespace": "ml",
            "container": _cid_on(sim, g0),
            "gpu": g0,
            "mig": "",
        },
    )
    assert ns == 1000 * MiB  # the namespace label comes from the grants


def _cid_on(sim: SimulatedDriver, gpu: str) -> str:
    (dev,) = [d for d in sim.sample() if d.uuid == gpu]
    cid = sim.attribute(dev.processes[0].pid).container_id
    assert cid is not None
    return cid
