"""Processes running on GPUs their pod was not given (a "leak").

A container that keeps ``NVIDIA_VISIBLE_DEVICES=all`` can use every GPU on the host,
so what the ledger granted and what the hardware shows can differ. This compares one
agent report with the grants (pod UID -> GPU UUIDs). Pure: the agent uses it for its
metrics and the extender imports it to flag discrepancies from the same report.

A process on a MIG instance is within its grant if the pod was granted either that MIG
device's UUID or the parent GPU's. Processes that could not be mapped to a pod are not
leaks (their owner is unknown; they show up as unattributed memory instead).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from extender.reports import NodeReport, PodGrant, ProcessReport

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
        placed: list[tuple[str | None, ProcessReport]] = [(None, p) for p in gpu.processes]
        placed += [(m.uuid, p) for m in gpu.mig for p in m.processes]
        for mig_uuid, p in placed:
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
