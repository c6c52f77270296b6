"""What the extender makes of one agent report against the ledger's grants. Pure.

The arithmetic (per-pod usage, leaks, unattributed memory) is ``extender.wire.usage``,
the same functions the agent's ``/metrics`` use; this module adds the extender's side:

- observations: memory each pod's processes use on each GPU (MIG instance: its UUID),
  the usage samples the ledger folds into the granted rows;
- overrun: a pod uses more than it was granted on a GPU (beyond a tolerance);
- leak: a pod's process on a GPU it was not granted;
- unaccounted: unattributed memory above what a driver keeps for itself, raised only
  when every pod process on the GPU was measured (else part of it may be a pod's).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from extender.core.allocation import EventKind, Observation
from extender.state.inventory import Grant
from extender.wire.report import GpuReport, NodeReport
from extender.wire.usage import find_leaks, pod_usage, pods_measured, unattributed_mib

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
    """``pod_usage`` summed over containers, per (pod, GPU or MIG instance)."""
    used: dict[tuple[str, str], int] = defaultdict(int)
    sm: dict[tuple[str, str], float] = {}
    for u in pod_usage(report):
        key = (u.pod_uid, u.mig_uuid or u.gpu_uuid)
        used[key] += u.used_mib
        if u.sm_util is not None:
            sm[key] = sm.get(key, 0.0) + u.sm_util
    return [Observation(pod, gpu, mib, sm.get((pod, gpu))) for (pod, gpu), mib in used.items()]


def discrepancies(
    report: NodeReport, grants: list[Grant], received: dict[str, set[str]] | None = None
) -> list[Discrepancy]:
    """Overruns, leaks and unaccounted memory; a process on a GPU kubelet says its pod
    holds (``received``, by pod UID) is no leak: that is a ``mismatch`` (``received.py``)."""
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
    for uid, gpus in (received or {}).items():
        by_pod[uid] |= gpus
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
    """Unattributed memory worth a finding: above the threshold (the driver's own share
    stays under it), and only when no pod process's size is unknown."""
    if not pods_measured(gpu):
        return 0
    left = unattributed_mib(gpu)
    return left if left > UNACCOUNTED_THRESHOLD_MIB else 0
