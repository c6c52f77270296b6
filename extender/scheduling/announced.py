"""Pods the pod watch saw pending, before kube-scheduler asks about them: their plans
are made ahead, so their filter finds them made.

A pod of a shape not seen before costs its filter a pass over every candidate, inside
kube-scheduler's wait (at 5,000 nodes most of the filter, docs/BENCHMARKS.md, "Plans
made ahead"). The extender's pod watch sees a pending pod when kube-scheduler's own
informer does, and kube-scheduler then runs its own filter plugins over every node
before it calls the extender (milliseconds at 5,000 nodes), so the pass fits in that
time: the watch thread announces the pod here (``put``), and the event loop, where
plans are made and used, makes its plan for the candidate list the latest filter sent
(``Cycle.prepare``). Nothing depends on it: a filter that comes first makes the plan
itself, and a prepared plan no filter asks for is evicted like any other.

Bounded twice, so a backlog (a re-list, a Job of many pods of many shapes) cannot fill
the event loop or the plans with work no filter will use soon: at most ``limit`` shapes
wait here, each prepared in a loop callback of its own (filters arriving meanwhile run
between them), and at most ``limit`` prepared pods are still waiting for their filter
(a pod whose filter has not come within ``window`` seconds stops counting).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

from extender.state.demand import DemandError, GpuDemand, demand_of
from extender.wire.protocol import Pod

log = logging.getLogger("headroom.service")
# posts a call to the event loop from any thread (``loop.call_soon_threadsafe``)
Post = Callable[[Callable[[], None]], object]
# makes the pod's plan (on the loop); False when it does not (see Cycle.prepare)
Prepare = Callable[[Pod, GpuDemand], bool]


class Announced:
    """The pods waiting to be prepared, one per shape, oldest first (kube-scheduler takes
    pods of one priority oldest first), and those prepared whose filter has not come."""

    def __init__(
        self, prepare: Prepare, now: Callable[[], float], limit: int = 4, window: float = 10.0
    ) -> None:
        self.prepare, self.now, self.limit, self.window = prepare, now, limit, window
        self._lock = threading.Lock()
        self._waiting: OrderedDict[Hashable, tuple[Pod, GpuDemand]] = OrderedDict()
        self._post: Post | None = None
        self._draining = False  # a drain is posted and not yet out of work
        self._prepared: OrderedDict[str, float] = OrderedDict()  # uid -> when (loop only)

    def serve_on(self, post: Post) -> None:
        """Where the plans are made: the event loop filters run on (the edge tells it at
        a filter; before any filter there is no candidate list to plan for)."""
        with self._lock:
            self._post, wake = post, bool(self._waiting)
            self._draining = wake  # a drain posted to a former loop may never run
        if wake:
            self._wake(post)

    def put(self, pod: Pod) -> bool:
        """From any thread: the pod is pending. False when it is not taken (no loop
        yet, no GPU count or an ask that cannot be read, its shape already waiting, or
        ``limit`` shapes waiting)."""
        post = self._post
        if post is None:
            return False
        try:
            demand = demand_of(pod)
        except DemandError:  # its filter answers that
            return False
        if not demand.count:
            return False
        key = (demand.key, demand.capacity)
        with self._lock:
            if key in self._waiting or len(self._waiting) >= self.limit:
                return False
            self._waiting[key] = (pod, demand)
            wake, self._draining = not self._draining, True
        return self._wake(post) if wake else True

    def filtered(self, uid: str) -> None:
        """On the event loop: the pod's filter came (its prepared plan, if any, used)."""
        if self._prepared.pop(uid, None) is not None and self._waiting:
            with self._lock:
                wake = not self._draining and bool(self._waiting)
                self._draining = self._draining or wake
            if wake and self._post is not None:
                self._wake(self._post)

    def _drain(self) -> None:
        """On the event loop: the oldest waiting pod prepared, then (posted anew, so what
        the loop has to read meanwhile comes first) the next; none while ``limit``
        prepared pods wait for their filter (``filtered`` or the next ``put`` resumes)."""
        expired = self.now() - self.window
        while self._prepared and next(iter(self._prepared.values())) < expired:
            self._prepared.popitem(last=False)
        with self._lock:
            if not self._waiting or len(self._prepared) >= self.limit:
                self._draining = False
                return
            _, (pod, demand) = self._waiting.popitem(last=False)
        try:
            if self.prepare(pod, demand):
                self._prepared[pod.metadata.uid] = self.now()
        except Exception:  # its filter meets the same and answers it; log, go on
            log.exception("preparing an announced pod's plan failed")
        post = self._post
        if post is not None:
            self._wake(post)

    def _wake(self, post: Post) -> bool:
        """A drain posted; if the loop is closed (shutting down), nothing waits."""
        try:
            post(self._drain)
            return True
        except RuntimeError:
            with self._lock:
                self._waiting.clear()
                self._draining = False
            return False
