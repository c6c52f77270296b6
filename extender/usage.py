"""What an agent report says about each grant: usage samples and discrepancies. Pure.

- observations: memory each pod's processes use on each GPU (MIG instance: its UUID);
- overrun: a pod uses more than it was granted on a GPU (beyond a tolerance);
- leak: a pod's process on a GPU it was not granted (``drivers.leaks.find_leaks``);
- unaccounted: device memory used by no known process beyond the driver's own share.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from drivers.leaks import find_leaks
from extender.allocation import EventKind, Observation
from extender.inventory import Grant
from extender.reports import GpuReport, NodeReport, ProcessReport

OVERRUN_TOLERANCE_MIB = 256
UNACCOUNTED_THRESHOLD_MIB = 1024


@dataclass(frozen=True, slots=True)
class Discrepancy:
    kind: EventKind
    node: str
    gpu_uuid: str
    pod_uid: str
    amount_mib: int
    detail: str


def observations(report: NodeReport) -> list[Observation]:
    used: dict[tuple[str, str], int] = defaultdict(int)
    sm: dict[tuple[str, str], float] = {}
    for uuid, procs in _units(report):
        for p in procs:
            if p.pod_uid is None:
                continue
            key = (p.pod_uid, uuid)
            used[key] += p.used_mib or 0
            if p.sm_util is not None:
                sm[key] = sm.get(key, 0.0) + p.sm_util
    return [Observation(pod, gpu, mib, sm.get((pod, gpu))) for (pod, gpu), mib in used.items()]


def discrepancies(report: NodeReport, grants: list[Grant]) -> list[Discrepancy]:
    granted = {(g.pod_uid, g.gpu_uuid): g.memory_mib for g in grants}
    out = [
        Discrepancy(
            EventKind.OVERRUN,
            report.node,
            o.gpu_uuid,
            o.pod_uid,
            o.used_mib - granted[(o.pod_uid, o.gpu_uuid)],
            f"uses {o.used_mib} MiB, granted {granted[(o.pod_uid, o.gpu_uuid)]} MiB",
        )
        for o in observations(report)
        if (o.pod_uid, o.gpu_uuid) in granted
        and o.used_mib > granted[(o.pod_uid, o.gpu_uuid)] + OVERRUN_TOLERANCE_MIB
    ]
    by_pod: dict[str, set[str]] = defaultdict(set)
    for g in grants:
        by_pod[g.pod_uid].add(g.gpu_uuid)
    for leak in find_leaks(report, by_pod):
        gpu = leak.mig_uuid or leak.gpu_uuid
        why = (
            "its pod has no GPU grant on this node"
            if leak.kind == "no_grant"
            else (f"its pod was granted {', '.join(leak.granted)}")
        )
        out.append(
            Discrepancy(
                EventKind.LEAK,
                report.node,
                gpu,
                leak.pod_uid,
                leak.used_mib or 0,
                f"pid {leak.pid} on {gpu}; {why}",
            )
        )
    out.extend(_unaccounted(report, g) for g in report.gpus if _unaccounted_mib(g) > 0)
    return out


def _unaccounted(report: NodeReport, gpu: GpuReport) -> Discrepancy:
    mib = _unaccounted_mib(gpu)
    return Discrepancy(
        EventKind.UNACCOUNTED,
        report.node,
        gpu.uuid,
        "",
        mib,
        f"{mib} MiB used by no process the agent could attribute to a pod",
    )


def _unaccounted_mib(gpu: GpuReport) -> int:
    """Used memory that no attributed process explains (the driver's own share stays
    under the threshold). Unknown when NVML could not give a process's memory."""
    if gpu.mig_enabled or any(p.used_mib is None for p in gpu.processes):
        return 0
    attributed = sum(p.used_mib or 0 for p in gpu.processes if p.pod_uid is not None)
    left = gpu.memory_used_mib - attributed
    return left if left > UNACCOUNTED_THRESHOLD_MIB else 0


def _units(report: NodeReport) -> list[tuple[str, list[ProcessReport]]]:
    units: list[tuple[str, list[ProcessReport]]] = []
    for g in report.gpus:
        units.append((g.uuid, g.processes))
        units.extend((m.uuid, m.processes) for m in g.mig)
    return units
