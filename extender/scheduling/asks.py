"""What each pod asks for, read once and remembered.

bind gets only a pod's name, namespace and UID, so every pod filter, prioritize or
preempt is shown is remembered with its demand (one that asks for no GPU too: bind
must know it asked for nothing). prioritize gets the very Pod object filter got (the
edge's decoder hands the same bytes back as the same object), so what was read from
it then is not read again.

Writes (``remember``, ``settle``) happen on the event loop alone, where filter,
prioritize and preempt run; the workload mix's version is part of every plan's key, so
a write from a bind thread could change it under a filter. A bind for a pod filter
never saw reads its ask with ``read``, which writes nothing.

A new pod joins the workload mix once it is answered: when another pod is remembered
or prepared (``settle``), not before its own plan. Every pod is scored against the mix
the pods before it taught (its filter and prioritize alike), so a plan made ahead of a
pod's filter (``announced``) is keyed by the mix version that filter finds, for the pod
after one that completes a publication window too. Only the first GPU pod replaces the
default mix before its own plan is made.
"""

from __future__ import annotations

from extender.core.allocation import PodRef
from extender.state.demand import GpuDemand, demand_of
from extender.state.podcache import PodCache, SeenPod, pod_ref
from extender.state.workload import WorkloadMix
from extender.wire.clock import Clock
from extender.wire.protocol import Pod


class Asks:
    """The pods seen lately (``pods``) and the workload mix their asks make (``mix``)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.pods = PodCache()
        self.mix = WorkloadMix()
        self._last: tuple[Pod, PodRef, GpuDemand] | None = None
        self._arrived: tuple[str, GpuDemand] | None = None  # a new pod's, for the mix

    def remember(self, pod: Pod) -> GpuDemand:
        """The pod's demand (DemandError when it cannot be read); a new GPU pod counts
        in the workload mix once another pod is remembered or prepared (``settle``)."""
        last = self._last
        if last is not None and last[0] is pod:
            ref, demand = last[1], last[2]
        else:
            demand, ref = demand_of(pod), pod_ref(pod)
            self._last = (pod, ref, demand)
        if self._arrived is not None and self._arrived[0] != ref.uid:
            self.settle()  # the pod before it, answered
        if self.pods.put(SeenPod(ref, demand, self.clock.now())) and demand.wants_gpu:
            self._arrived = (ref.uid, demand)
            if not self.mix.version:  # the default mix is a guess: the first pod's own
                self.settle()  # ask is a better one, and no plan was made ahead of it
        return demand

    def settle(self) -> None:
        """The latest new GPU pod remembered, answered by now, counted in the mix."""
        arrived, self._arrived = self._arrived, None
        if arrived is not None:
            self.mix.observe(arrived[1])

    def seen(self, uid: str) -> SeenPod | None:
        return self.pods.get(uid)

    def read(self, pod: Pod) -> SeenPod:
        """The pod's ask, for a bind thread: nothing remembered, the mix untouched
        (DemandError when it cannot be read)."""
        return SeenPod(pod_ref(pod), demand_of(pod), self.clock.now())
