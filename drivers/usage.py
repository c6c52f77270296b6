"""Per-pod GPU usage from one report: the numbers that must add up to the device.

Device-level exporters show every pod on a shared card the same number (three pods on
one GPU look like 300%). Here each process's memory goes to the pod that owns it, and
whatever the device uses beyond that (driver reserve, unmapped processes, processes
whose memory NVML cannot tell) is *unattributed*, so that for every GPU:

    sum(pod usage on the GPU) + unattributed == device used

Pure functions over ``extender.reports`` structs, so the extender can use them too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from extender.reports import GpuReport, NodeReport, ProcessReport


@dataclass(frozen=True, slots=True)
class PodUsage:
    """One pod's (container's) use of one GPU or MIG instance."""

    pod_uid: str
    container_id: str  # "" when the runtime id could not be read
    gpu_uuid: str  # the physical GPU
    mig_uuid: str  # "" on a whole GPU
    used_mib: int
    sm_util: float | None  # sum of per-process SM %, None without samples
    processes: int


def _placed(gpu: GpuReport) -> Iterator[tuple[str, ProcessReport]]:
    """Every process on a GPU with the MIG instance it runs on ("" for the whole GPU)."""
    for p in gpu.processes:
        yield "", p
    for m in gpu.mig:
        for p in m.processes:
            yield m.uuid, p


def pod_usage(report: NodeReport) -> list[PodUsage]:
    """Aggregate mapped processes per (pod, container, GPU, MIG instance)."""
    acc: dict[tuple[str, str, str, str], tuple[int, float | None, int]] = {}
    for gpu in report.gpus:
        for mig_uuid, p in _placed(gpu):
            if p.pod_uid is None:
                continue
            key = (p.pod_uid, p.container_id or "", gpu.uuid, mig_uuid)
            used, sm, n = acc.get(key, (0, None, 0))
            if p.sm_util is not None:
                sm = (sm or 0.0) + p.sm_util
            acc[key] = (used + (p.used_mib or 0), sm, n + 1)
    return [
        PodUsage(pod, ctr, gpu, mig, used, sm, n)
        for (pod, ctr, gpu, mig), (used, sm, n) in acc.items()
    ]


def attributed_mib(gpu: GpuReport) -> int:
    """Memory on this GPU that belongs to a known pod."""
    return sum(p.used_mib or 0 for _, p in _placed(gpu) if p.pod_uid is not None)


def unattributed_mib(gpu: GpuReport) -> int:
    """Device used memory that no pod accounts for (never negative: NVML's per-process
    figures are rounded separately from the device total)."""
    return max(0, gpu.memory_used_mib - attributed_mib(gpu))


def unmapped_processes(gpu: GpuReport) -> dict[str, int]:
    """How many processes could not be mapped to a pod, by reason."""
    out: dict[str, int] = {}
    for _, p in _placed(gpu):
        if p.pod_uid is None:
            reason = p.unmapped_reason or "unknown"
            out[reason] = out.get(reason, 0) + 1
    return out
