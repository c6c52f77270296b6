"""The node agent: sample the GPUs, attribute processes to pods, report, repeat.

``build_report`` is the pure-ish core (one driver sample + one attributor lookup per
process -> one wire ``NodeReport``); ``Agent`` adds the state between samples (latest
grants, leaks, metrics) and the loop. The loop is a single thread on purpose: a report
is built, sent with retries bounded by the time left until the next sample, then the
next one is built. So there is never more than one report in flight and an unsent
report is simply superseded by the next sample.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from drivers.agent.metrics import AgentMetrics, Snapshot
from drivers.agent.sender import ReportSender
from drivers.attribution.pods import Attributor, CachedAttributor
from drivers.gpu.base import GpuDevice, GpuDriver, GpuProcess, MigInstance
from extender.wire.clock import Clock
from extender.wire.report import (
    MAX_GPUS,
    MAX_MIG_PER_GPU,
    MAX_PROCESSES_PER_GPU,
    MAX_STRING,
    GpuReport,
    MigReport,
    NodeReport,
    PodGrant,
    PodReceived,
    ProcessReport,
    ReportResponse,
)
from extender.wire.usage import Leak, find_leaks
from extender.wire.version import __version__

log = logging.getLogger("headroom.agent")

SEND_BUDGET_FRACTION = 0.9
"""Share of the interval a report may spend retrying before the next sample is due."""


def build_report(
    driver: GpuDriver,
    node: str,
    attribute: Attributor,
    clock: Clock,
    *,
    labels: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    received: list[PodReceived] | None = None,
) -> NodeReport:
    """Sample ``driver`` once and turn it into a schema-v1 report.

    Every process is kept, mapped or not (an unmapped one carries its reason), and the
    report is clipped to the bounds the extender enforces on receipt. ``received`` is
    what kubelet's pod-resources says each pod holds (None: not read).
    """
    devices = driver.sample()
    sampled_at = clock.now()
    if len(devices) > MAX_GPUS:
        log.warning(
            "more GPUs than a report may carry; clipping", extra={"fields": {"gpus": len(devices)}}
        )
    return NodeReport(
        node=node,
        sampled_at=sampled_at,
        gpus=[_gpu_report(d, attribute) for d in devices[:MAX_GPUS]],
        agent_version=__version__,
        driver=driver.name,
        driver_version=driver.driver_version(),
        labels=dict(labels or {}),
        allocatable=dict(allocatable or {}),
        received=received,
    )


def _gpu_report(d: GpuDevice, attribute: Attributor) -> GpuReport:
    return GpuReport(
        uuid=_clip(d.uuid),
        index=d.index,
        model=_clip(d.model),
        memory_total_mib=d.memory_total_mib,
        memory_used_mib=d.memory_used_mib,
        memory_reserved_mib=d.memory_reserved_mib,
        utilization_gpu=d.utilization_gpu,
        healthy=d.health.healthy,
        health_reason=_clip(d.health.reason) if d.health.reason else None,
        mig_enabled=d.mig_enabled,
        mig=[_mig_report(m, attribute) for m in d.mig[:MAX_MIG_PER_GPU]],
        processes=_process_reports(d.processes, attribute),
    )


def _mig_report(m: MigInstance, attribute: Attributor) -> MigReport:
    return MigReport(
        uuid=_clip(m.uuid),
        profile=_clip(m.profile),
        memory_total_mib=m.memory_total_mib,
        memory_used_mib=m.memory_used_mib,
        gpu_instance_id=m.gpu_instance_id,
        compute_instance_id=m.compute_instance_id,
        processes=_process_reports(m.processes, attribute),
    )


def _process_reports(procs: tuple[GpuProcess, ...], attribute: Attributor) -> list[ProcessReport]:
    out = []
    for p in procs[:MAX_PROCESSES_PER_GPU]:
        a = attribute(p.pid)
        out.append(
            ProcessReport(
                pid=p.pid,
                used_mib=p.used_mib,
                pod_uid=_clip(a.pod_uid) if a.pod_uid else None,
                container_id=_clip(a.container_id) if a.container_id else None,
                sm_util=p.sm_util,
                unmapped_reason=None if a.mapped else _clip(a.reason or "unknown"),
            )
        )
    return out


def _clip(text: str) -> str:
    return text if len(text) <= MAX_STRING else text[: MAX_STRING - 3] + "..."


def live_pids(report: NodeReport) -> set[int]:
    pids = {p.pid for g in report.gpus for p in g.processes}
    pids.update(p.pid for g in report.gpus for m in g.mig for p in m.processes)
    return pids


@dataclass
class AgentState:
    """What the agent remembers between samples."""

    report: NodeReport | None = None
    grants: list[PodGrant] = field(default_factory=list)
    have_grants: bool = False  # no leak is claimed before the extender ever answered
    leaks: list[Leak] = field(default_factory=list)
    last_sample_monotonic: float | None = None


class Agent:
    """Sampling, leak tracking and metrics; ``run`` is the reporting loop."""

    def __init__(
        self,
        driver: GpuDriver,
        node: str,
        attribute: Attributor,
        clock: Clock,
        *,
        sender: ReportSender | None = None,
        metrics: AgentMetrics | None = None,
        interval_s: float = 5.0,
        labels: dict[str, str] | None = None,
        allocatable: dict[str, str] | None = None,
        received: Callable[[], list[PodReceived] | None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.driver = driver
        self.node = node
        self.attribute = attribute
        self.clock = clock
        self.metrics = metrics or (sender.metrics if sender else AgentMetrics())
        self.sender = sender
        self.interval_s = interval_s
        self.labels = labels or {}
        self.allocatable = allocatable or {}
        self.received = received  # kubelet's pod-resources List (None: not read)
        self.state = AgentState()
        self._monotonic = monotonic
        self._lock = threading.Lock()

    def sample(self) -> NodeReport:
        """Build one report and refresh metrics and leaks against the latest grants."""
        with self.metrics.sample_seconds.time():
            report = build_report(
                self.driver,
                self.node,
                self.attribute,
                self.clock,
                labels=self.labels,
                allocatable=self.allocatable,
                received=self.received() if self.received else None,
            )
        if isinstance(self.attribute, CachedAttributor):
            self.attribute.retain(live_pids(report))
        with self._lock:
            self.state.report = report
            self.state.last_sample_monotonic = self._monotonic()
            self._refresh()
        self.metrics.last_sample.set(report.sampled_at)
        return report

    def accept(self, response: ReportResponse) -> None:
        """Keep the extender's latest grants for this node and re-check leaks."""
        with self._lock:
            self.state.grants = list(response.grants)
            self.state.have_grants = True
            self._refresh()
        self.metrics.last_success.set(self.clock.now())

    def healthy(self, max_age_s: float | None = None) -> bool:
        """Sampling is alive (a dead extender does not make the agent unhealthy)."""
        limit = max_age_s if max_age_s is not None else 3 * self.interval_s + 5.0
        last = self.state.last_sample_monotonic
        return last is not None and self._monotonic() - last <= limit

    def _refresh(self) -> None:
        report = self.state.report
        if report is None:
            return
        leaks = find_leaks(report, self.state.grants) if self.state.have_grants else []
        if leaks and leaks != self.state.leaks:
            log.warning(
                "processes on GPUs their pod was not granted",
                extra={
                    "fields": {
                        "leaks": [_leak_fields(lk) for lk in leaks[:20]],
                        "count": len(leaks),
                    }
                },
            )
        self.state.leaks = leaks
        namespaces = {g.pod_uid: g.namespace for g in self.state.grants}
        self.metrics.reports.update(Snapshot(report=report, namespaces=namespaces, leaks=leaks))

    def tick(self, budget_s: float) -> ReportResponse | None:
        """One sample and (if a sender is set) one bounded delivery attempt."""
        try:
            report = self.sample()
        except Exception:  # a driver bug must not stop the loop; next tick retries
            log.exception("sampling failed")
            return None
        if self.sender is None:
            return None
        try:
            response = self.sender.send(report, budget_s)
        except Exception:  # e.g. a malformed --extender URL: log, drop, keep sampling
            log.exception("report send failed unexpectedly")
            return None
        if response is not None:
            self.accept(response)
        return response

    def run(self, stop: threading.Event, *, max_ticks: int | None = None) -> int:
        """Tick every ``interval_s`` until ``stop`` is set; returns the ticks done.

        Ticks are scheduled on a fixed grid; a tick that overran starts the next one at
        once instead of firing a burst to catch up the missed slots.
        """
        ticks = 0
        started = self._monotonic()
        while not stop.is_set() and (max_ticks is None or ticks < max_ticks):
            due = started + self.interval_s
            self.tick(budget_s=max(0.0, due - self._monotonic()) * SEND_BUDGET_FRACTION)
            ticks += 1
            now = self._monotonic()
            started = due if now <= due else now
            stop.wait(max(0.0, started - now))
        return ticks


def _leak_fields(lk: Leak) -> dict[str, object]:
    return {
        "pod_uid": lk.pod_uid,
        "gpu": lk.gpu_uuid,
        "pid": lk.pid,
        "kind": lk.kind,
        "mig": lk.mig_uuid,
    }
