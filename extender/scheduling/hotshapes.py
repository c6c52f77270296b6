"""The pod shapes scheduled lately: their plans are brought up to date after each agent
report and each bind, off the scheduling cycle.

A report that moves a node's numbers voids the answers kept with every plan listing the
node, and the next filter for the shape patched its plan and made its answers again,
inside kube-scheduler's wait: at 5,000 nodes with 1% of them reporting between two pods,
more than half of that filter's time in the server (docs/BENCHMARKS.md, "eighth round").
Nothing waits on a report once it is answered, so the service patches the plans of the
shapes scheduled in the last ``window`` seconds right after the reply is sent, and the
next pod of such a shape finds its answer made. A bind changes its node the same way
(memory reserved), and kube-scheduler binds in a goroutine of its own while the next
pod's filter is on its way: the patch is made then too, unless that filter is first.
Replicas of one shape in a row are the common case; ``limit`` bounds the work a report
adds (a shape costs ~0.1-0.3 ms per report at 5,000 nodes), and a shape not scheduled
lately costs nothing, nor does one whose latest filter came with another candidate list
than its widest plan's (``Plans.parent``: a backlog draining as nodes fill).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from extender.state.demand import GpuDemand


class HotShapes:
    """The latest ``limit`` device-plugin shapes filtered, each with when it last was."""

    def __init__(self, limit: int = 2, window: float = 10.0) -> None:
        self.limit, self.window = limit, window
        self._seen: OrderedDict[Hashable, tuple[GpuDemand, float]] = OrderedDict()

    def touch(self, demand: GpuDemand, now: float) -> None:
        """A pod of this shape was filtered at ``now``."""
        if self.limit <= 0:
            return
        key = (demand.key, demand.capacity)
        self._seen[key] = (demand, now)
        self._seen.move_to_end(key)
        while len(self._seen) > self.limit:
            self._seen.popitem(last=False)

    def recent(self, now: float) -> list[GpuDemand]:
        """The shapes filtered within the window, most recent first."""
        return [d for d, seen in reversed(self._seen.values()) if now - seen <= self.window]
