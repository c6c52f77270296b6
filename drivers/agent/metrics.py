"""The agent's Prometheus metrics (``headroom_agent_*``).

Per-pod and per-device series are rendered at scrape time from the latest report
(a custom collector), not kept in labelled gauges: a pod that ended simply disappears
from the next scrape instead of leaving a stale series behind forever. Send outcomes
are ordinary counters/histograms.

Memory is exported in bytes and utilisation as a 0..1 ratio, per Prometheus naming
conventions; the wire report keeps MiB and percent.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from extender.wire.report import GpuReport, NodeReport
from extender.wire.usage import Leak, pod_usage, unattributed_mib, unmapped_processes

MiB = 1024 * 1024

_GPU_LABELS = ["gpu", "index", "model"]
_POD_LABELS = ["pod_uid", "namespace", "container", "gpu", "mig"]


@dataclass
class Snapshot:
    """What the last sample and the last extender answer said."""

    report: NodeReport | None = None
    namespaces: Mapping[str, str] = field(default_factory=dict)  # pod UID -> namespace
    leaks: list[Leak] = field(default_factory=list)


class ReportCollector(Collector):
    """Renders device and per-pod series from the current ``Snapshot``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snap = Snapshot()

    def update(self, snap: Snapshot) -> None:
        with self._lock:
            self._snap = snap

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snap = self._snap
        if snap.report is None:
            return
        yield from _device_metrics(snap.report.gpus)
        yield from _pod_metrics(snap.report, snap.namespaces)
        yield _leak_metric(snap.leaks, snap.namespaces)


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _device_metrics(gpus: list[GpuReport]) -> Iterator[Metric]:
    total = _gauge("headroom_agent_gpu_memory_total_bytes", "GPU memory size.", _GPU_LABELS)
    used = _gauge("headroom_agent_gpu_memory_used_bytes", "GPU memory in use (NVML).", _GPU_LABELS)
    reserved = _gauge(
        "headroom_agent_gpu_memory_reserved_bytes",
        "Driver/firmware memory outside 'used' (NVML v2 memory info).",
        _GPU_LABELS,
    )
    unattributed = _gauge(
        "headroom_agent_gpu_memory_unattributed_bytes",
        "Used memory no pod accounts for (driver reserve, unmapped processes).",
        _GPU_LABELS,
    )
    util = _gauge("headroom_agent_gpu_utilization_ratio", "GPU utilisation, 0..1.", _GPU_LABELS)
    healthy = _gauge("headroom_agent_gpu_healthy", "1 if NVML answered sanely.", _GPU_LABELS)
    unmapped = _gauge(
        "headroom_agent_gpu_unmapped_processes",
        "Processes on the GPU that could not be mapped to a pod.",
        [*_GPU_LABELS, "reason"],
    )
    for g in gpus:
        labels = [g.uuid, str(g.index), g.model]
        total.add_metric(labels, g.memory_total_mib * MiB)
        used.add_metric(labels, g.memory_used_mib * MiB)
        if g.memory_reserved_mib is not None:
            reserved.add_metric(labels, g.memory_reserved_mib * MiB)
        unattributed.add_metric(labels, unattributed_mib(g) * MiB)
        if g.utilization_gpu is not None:
            util.add_metric(labels, g.utilization_gpu / 100.0)
        healthy.add_metric(labels, 1.0 if g.healthy else 0.0)
        for reason, n in sorted(unmapped_processes(g).items()):
            unmapped.add_metric([*labels, reason], n)
    yield from (total, used, reserved, unattributed, util, healthy, unmapped)


def _pod_metrics(report: NodeReport, namespaces: Mapping[str, str]) -> Iterator[Metric]:
    mem = _gauge(
        "headroom_agent_pod_gpu_memory_used_bytes",
        "GPU memory used by a pod's processes on one GPU (sums to the device, not N x).",
        _POD_LABELS,
    )
    sm = _gauge(
        "headroom_agent_pod_gpu_sm_utilization_ratio",
        "Sum of per-process SM utilisation of a pod on one GPU, 0..1 (absent on MIG).",
        _POD_LABELS,
    )
    for u in pod_usage(report):
        labels = [u.pod_uid, namespaces.get(u.pod_uid, ""), u.container_id, u.gpu_uuid, u.mig_uuid]
        mem.add_metric(labels, u.used_mib * MiB)
        if u.sm_util is not None:
            sm.add_metric(labels, u.sm_util / 100.0)
    yield from (mem, sm)


def _leak_metric(leaks: list[Leak], namespaces: Mapping[str, str]) -> Metric:
    fam = _gauge(
        "headroom_agent_leaked_processes",
        "Processes on a GPU their pod was not granted (per the extender's last answer).",
        ["pod_uid", "namespace", "gpu", "kind"],
    )
    counts: dict[tuple[str, str, str], int] = {}
    for lk in leaks:
        key = (lk.pod_uid, lk.gpu_uuid, lk.kind)
        counts[key] = counts.get(key, 0) + 1
    for (pod, gpu, kind), n in sorted(counts.items()):
        fam.add_metric([pod, namespaces.get(pod, ""), gpu, kind], n)
    return fam


class AgentMetrics:
    """All agent metrics on one registry (not the global one: tests and an in-process
    simulator can run several agents)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.reports = ReportCollector()
        self.registry.register(self.reports)
        self.send_failures = Counter(
            "headroom_agent_report_send_failures_total",
            "Failed report send attempts, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.reports_sent = Counter(
            "headroom_agent_reports_sent_total",
            "Reports the extender accepted.",
            registry=self.registry,
        )
        self.reports_dropped = Counter(
            "headroom_agent_reports_dropped_total",
            "Reports given up after bounded retries (a newer sample replaces them).",
            registry=self.registry,
        )
        self.send_seconds = Histogram(
            "headroom_agent_report_send_duration_seconds",
            "Latency of one report POST attempt.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=self.registry,
        )
        self.sample_seconds = Histogram(
            "headroom_agent_sample_duration_seconds",
            "Time to sample the driver and build one report.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=self.registry,
        )
        self.last_sample = Gauge(
            "headroom_agent_last_sample_timestamp_seconds",
            "When the last report was built (agent clock).",
            registry=self.registry,
        )
        self.last_success = Gauge(
            "headroom_agent_last_report_success_timestamp_seconds",
            "When the extender last accepted a report (agent clock).",
            registry=self.registry,
        )
