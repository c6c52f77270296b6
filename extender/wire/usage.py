"""Report arithmetic both sides share: per-pod usage, leaks, unattributed memory. Pure.

Device-level exporters show every pod on a shared card the same number (three pods on
one GPU look like 300%). Here each process's memory goes to the pod that owns it, and
whatever the device uses beyond that (driver reserve, unmapped processes, processes
whose memory NVML cannot tell) is *unattributed*, so that for every GPU:

    sum(pod usage on the GPU and its MIG instances) + unattributed == device used

A *leak* is a pod's process on a GPU its pod was not granted: a container that keeps
``NVIDIA_VISIBLE_DEVICES=all`` can use every GPU on the host, so what the ledger
granted and what the hardware shows can differ. A process on a MIG instance is within
its grant if the pod was granted either that MIG device's UUID or the parent GPU's.
Processes that could not be mapped to a pod are not leaks (their owner is unknown; they
show up as unattributed memory instead).

The agent uses these for its ``/metrics``; the extender uses the same functions on the
same report for its ledger samples, discrepancies and each GPU's committed memory
(``extender.state.committed``), so both count alike.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from extender.wire.report import GpuReport, MigReport, NodeReport, PodGrant, ProcessReport

# --- per-pod usage and unattributed memory -------------------------------------------


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


def _placed(gpu: GpuReport | MigReport) -> Iterator[tuple[str, ProcessReport]]:
    """Every process on a GPU with the MIG instance it runs on ("" for the whole GPU);
    given one MIG instance, the processes on that instance alone."""
    if isinstance(gpu, MigReport):
        for p in gpu.processes:
            yield gpu.uuid, p
        return
    for p in gpu.processes:
        yield "", p
    for m in gpu.mig:
        for p in m.processes:
            yield m.uuid, p


def pod_usage(report: NodeReport) -> list[PodUsage]:
    """Aggregate mapped processes per (pod, container, GPU, MIG instance), in report order."""
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


def pods_mib(unit: GpuReport | MigReport) -> dict[str, int]:
    """``pod_usage`` of one GPU or MIG instance summed over containers: MiB per pod UID."""
    out: dict[str, int] = {}
    for _, p in _placed(unit):
        if p.pod_uid is not None:
            out[p.pod_uid] = out.get(p.pod_uid, 0) + (p.used_mib or 0)
    return out


def attributed_mib(gpu: GpuReport | MigReport) -> int:
    """Memory on this GPU (whole or any MIG instance), or on this one MIG instance, that
    belongs to a known pod."""
    return sum(pods_mib(gpu).values())


def unattributed_mib(gpu: GpuReport | MigReport) -> int:
    """Device used memory that no pod accounts for. Given a MIG instance, that
    instance's (the extender places pods on instances, not parents)."""
    return _unattributed(gpu, attributed_mib(gpu))


def unit_use(unit: GpuReport | MigReport) -> tuple[dict[str, int], int]:
    """``pods_mib`` and ``unattributed_mib`` of one GPU or MIG instance from one pass
    over its processes: what the extender's committed memory charges, per report."""
    pods = pods_mib(unit)
    return pods, _unattributed(unit, sum(pods.values()))


def _unattributed(unit: GpuReport | MigReport, attributed: int) -> int:
    """The one definition of unattributed memory: device use beyond the pods'.

    Never negative (NVML's per-process figures are rounded separately from the device
    total). Includes the memory of a pod's process whose size NVML could not tell; see
    ``pods_measured`` for whether any of it may be a pod's."""
    return max(0, unit.memory_used_mib - attributed)


def pods_measured(gpu: GpuReport) -> bool:
    """Whether every pod-mapped process on the GPU has a memory figure, so that none of
    the unattributed memory can belong to a known pod."""
    return all(p.used_mib is not None for _, p in _placed(gpu) if p.pod_uid is not None)


def unmapped_processes(gpu: GpuReport) -> dict[str, int]:
    """How many processes could not be mapped to a pod, by reason."""
    out: dict[str, int] = {}
    for _, p in _placed(gpu):
        if p.pod_uid is None:
            reason = p.unmapped_reason or "unknown"
            out[reason] = out.get(reason, 0) + 1
    return out


# --- leaks ----------------------------------------------------------------------------

LeakKind = Literal["wrong_gpu", "no_grant"]


@dataclass(frozen=True, slots=True)
class Leak:
    """One process outside its pod's grant.

    ``kind`` is ``wrong_gpu`` when the pod has grants but not this GPU, ``no_grant``
    when the pod has no grant at all on this node (e.g. it bypassed the extender).
    """

    pod_uid: str
    gpu_uuid: str
    pid: int
    kind: LeakKind
    used_mib: int | None = None
    mig_uuid: str | None = None
    container_id: str | None = None
    granted: tuple[str, ...] = ()


Grants = Mapping[str, Collection[str]] | Iterable[PodGrant]


def grants_by_pod(grants: Grants) -> dict[str, frozenset[str]]:
    """Normalise ``PodGrant`` lists or plain mappings to pod UID -> granted UUIDs."""
    if isinstance(grants, Mapping):
        return {pod: frozenset(uuids) for pod, uuids in grants.items()}
    out: dict[str, set[str]] = {}
    for g in grants:
        out.setdefault(g.pod_uid, set()).update(g.gpu_uuids)
    return {pod: frozenset(uuids) for pod, uuids in out.items()}


def find_leaks(report: NodeReport, grants: Grants, *, include_ungranted: bool = True) -> list[Leak]:
    """Every mapped process in ``report`` on a GPU its pod was not granted, sorted by
    (pod, GPU, pid). ``include_ungranted=False`` ignores pods with no grant at all."""
    by_pod = grants_by_pod(grants)
    leaks: list[Leak] = []
    for gpu in report.gpus:
        for mig, p in _placed(gpu):
            mig_uuid = mig or None
            if p.pod_uid is None:
                continue
            granted = by_pod.get(p.pod_uid)
            if granted is not None and (gpu.uuid in granted or mig_uuid in granted):
                continue
            if granted is None and not include_ungranted:
                continue
            leaks.append(
                Leak(
                    pod_uid=p.pod_uid,
                    gpu_uuid=gpu.uuid,
                    pid=p.pid,
                    kind="no_grant" if granted is None else "wrong_gpu",
                    used_mib=p.used_mib,
                    mig_uuid=mig_uuid,
                    container_id=p.container_id,
                    granted=tuple(sorted(granted or ())),
                )
            )
    leaks.sort(key=lambda lk: (lk.pod_uid, lk.gpu_uuid, lk.pid))
    return leaks
