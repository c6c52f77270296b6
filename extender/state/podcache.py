"""Pods seen by filter/prioritize, so bind (which gets only name/namespace/UID) knows
what the pod asked for. Bounded: oldest entries go first."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from extender.core.allocation import PodRef
from extender.state.demand import GpuDemand
from extender.wire.protocol import Pod


def pod_ref(pod: Pod) -> PodRef:
    """Who the pod is, for the ledger: its controller (or first owner) names the
    workload its cost is charged to."""
    meta = pod.metadata
    owner = next((o for o in meta.ownerReferences or [] if o.controller), None)
    if owner is None and meta.ownerReferences:
        owner = meta.ownerReferences[0]
    return PodRef(
        uid=meta.uid or f"{meta.namespace}/{meta.name}",
        namespace=meta.namespace or "default",
        name=meta.name,
        owner_kind=owner.kind if owner else "",
        owner_name=owner.name if owner else "",
        labels=dict(meta.labels or {}),
    )


@dataclass(frozen=True, slots=True)
class SeenPod:
    ref: PodRef
    demand: GpuDemand
    seen_at: float


class PodCache:
    def __init__(self, capacity: int = 50_000) -> None:
        self._items: OrderedDict[str, SeenPod] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def put(self, pod: SeenPod) -> bool:
        """Remember a pod; True if it was not known before (a new arrival)."""
        with self._lock:
            new = pod.ref.uid not in self._items
            self._items[pod.ref.uid] = pod
            self._items.move_to_end(pod.ref.uid)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)
            return new

    def get(self, uid: str) -> SeenPod | None:
        with self._lock:
            return self._items.get(uid)

    def pop(self, uid: str) -> SeenPod | None:
        with self._lock:
            return self._items.pop(uid, None)
