"""Which pod is kubelet admitting? Answered from grants, never from a request's size.

kubelet's ``Allocate`` carries device ids only, no pod. The extender's bind writes each
pod's grant on it (``headroom.dev/gpu-uuids``, ``headroom.dev/gpu-memory-mib``); the
plugin acknowledges an admitted grant with ``headroom.dev/allocated``. So a request is
for the one pod on this node whose grant is not yet fully acknowledged and whose granted
GPUs hold every device kubelet chose. No such pod, or more than one, is an error the
caller turns into a failed Allocate: a wrong GPU is worse than a retried admission
(peers that matched by size handed pods each other's GPUs).

Pure functions over plain data, so every rule is tested without kubelet or an API.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from drivers.deviceplugin.slots import gpu_of
from extender.wire.annotations import ANN_ALLOCATED, ANN_GPU_MEMORY_MIB, ANN_GPU_UUIDS


@dataclass(frozen=True, slots=True)
class PodView:
    """What the plugin needs of a pod bound to its node."""

    uid: str
    namespace: str
    name: str
    annotations: dict[str, str]
    requested: int  # the plugin's resource, summed over app containers (init: max)
    created: float = 0.0  # creation time, seconds; kubelet admits older pods first
    active: bool = True  # not terminal and not being deleted
    terminal: bool = False  # Succeeded or Failed (kubelet rejected it, or it ended)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Grant:
    """A pod's grant on this node and what of it kubelet has already allocated."""

    pod: PodView
    gpu_uuids: tuple[str, ...]
    memory_mib: int  # per GPU; 0 = the whole GPU
    allocated: tuple[str, ...]  # slot ids already acknowledged

    @property
    def pending(self) -> bool:
        """Bound here but not every requested slot acknowledged yet."""
        return self.pod.active and len(self.allocated) < self.pod.requested

    def remaining_gpus(self) -> list[str]:
        """Granted GPUs no acknowledged slot of this pod sits on yet, in grant order."""
        used = {gpu_of(a) for a in self.allocated}
        return [g for g in self.gpu_uuids if g not in used]


class NoMatch(Exception):
    """The devices cannot be tied to exactly one pending grant; the message says why."""


def grant_of(pod: PodView) -> Grant | None:
    """The grant a pod carries, or None when it has none (not placed by headroom)."""
    raw = pod.annotations.get(ANN_GPU_UUIDS, "")
    uuids = tuple(u for u in raw.split(",") if u)
    if not uuids:
        return None
    try:
        mib = int(pod.annotations.get(ANN_GPU_MEMORY_MIB, "0") or "0")
    except ValueError:
        mib = 0
    allocated = tuple(a for a in pod.annotations.get(ANN_ALLOCATED, "").split(",") if a)
    return Grant(pod, uuids, max(mib, 0), allocated)


def grants_of(pods: Iterable[PodView], node_gpus: set[str]) -> list[Grant]:
    """Grants on this node's GPUs, oldest pod first (kubelet's admission order).

    A grant naming a GPU this node does not advertise (a MIG instance, another node's
    card after a rename) is not ours to serve and is left out.
    """
    out = [g for g in (grant_of(p) for p in pods) if g is not None]
    out = [g for g in out if set(g.gpu_uuids) <= node_gpus]
    return sorted(out, key=lambda g: (g.pod.created, g.pod.key))


def match(grants: Sequence[Grant], device_ids: Sequence[str]) -> Grant:
    """The one pending grant whose remaining GPUs hold ``device_ids``, one slot per GPU.

    Raises ``NoMatch`` naming the devices and the pending grants when none or several fit.
    """
    if not device_ids:
        raise NoMatch("no devices in the request")
    gpus = [gpu_of(d) for d in device_ids]
    bad = [d for d, g in zip(device_ids, gpus, strict=True) if g is None]
    if bad:
        raise NoMatch(f"device ids {bad} are not headroom slots (<GPU-UUID>::<k>)")
    wanted = {g for g in gpus if g is not None}
    if len(wanted) != len(device_ids):
        raise NoMatch(
            f"devices {sorted(device_ids)} put two slots on one GPU; a grant is one slot "
            "per granted GPU"
        )
    pending = [g for g in grants if g.pending]
    fits = [g for g in pending if wanted <= set(g.remaining_gpus())]
    if len(fits) == 1:
        return fits[0]
    shown = "; ".join(f"{g.pod.key} -> {','.join(g.remaining_gpus())}" for g in pending)
    if not fits:
        raise NoMatch(
            f"devices {sorted(device_ids)} are not on the GPUs granted to any pod awaiting "
            f"admission on this node (pending: {shown or 'none'})"
        )
    raise NoMatch(
        f"devices {sorted(device_ids)} fit the grants of {len(fits)} pods "
        f"({', '.join(g.pod.key for g in fits)}); cannot tell which pod is admitted"
    )


def preferred(
    grants: Sequence[Grant],
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
) -> list[str]:
    """Slots to offer kubelet for a container of ``size`` devices: one on each GPU of the
    oldest pending grant that can take them, lowest free slot first.

    Advisory (kubelet may choose otherwise, and Allocate still checks); an empty answer
    leaves the choice to kubelet, which Allocate then judges.
    """
    must_gpus = {gpu_of(d) for d in must_include}
    free: dict[str, list[str]] = {}
    for d in sorted(available, key=_slot_order):
        g = gpu_of(d)
        if g is not None:
            free.setdefault(g, []).append(d)
    for grant in grants:
        if not grant.pending:
            continue
        gpus = grant.remaining_gpus()
        if len(gpus) < size or not must_gpus <= set(gpus):
            continue
        ordered = [g for g in gpus if g in must_gpus] + [g for g in gpus if g not in must_gpus]
        chosen: list[str] = []
        for g in ordered[:size]:
            inc = [d for d in must_include if gpu_of(d) == g]
            options = inc or free.get(g, [])
            if not options:
                break
            chosen.append(options[0])
        if len(chosen) == size:
            return chosen
    return []


def _slot_order(device_id: str) -> tuple[str, int]:
    gpu, _, k = device_id.rpartition("::")
    return (gpu, int(k) if k.isdigit() else 0)
