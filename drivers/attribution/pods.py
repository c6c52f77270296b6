"""Mapping a GPU process (host PID) to the pod that owns it.

NVML only knows PIDs; billing and leak detection need pods. An *attributor* is any
callable ``pid -> Attribution``: the cgroup reader on a real node, the simulator's own
table in demos. A PID that cannot be mapped is still returned, with the reason, so
unattributed memory is visible instead of silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Attribution:
    """Who owns a PID. ``pod_uid`` None means unmapped and ``reason`` says why."""

    pod_uid: str | None = None
    container_id: str | None = None
    reason: str | None = None

    @property
    def mapped(self) -> bool:
        return self.pod_uid is not None


Attributor = Callable[[int], Attribution]


def unmapped(reason: str) -> Attribution:
    return Attribution(reason=reason)


class CachedAttributor:
    """Remember mappings for PIDs that stay alive between samples.

    Reading ``/proc/<pid>/cgroup`` for a few hundred GPU processes every second is cheap
    but not free. A PID keeps its cgroup for life, so a mapping is reused while the PID
    is seen in consecutive samples; ``retain`` forgets PIDs that disappeared (so a
    recycled PID is looked up afresh). Failures are not cached: a process that was
    racing its own cgroup move gets another chance next sample.
    """

    def __init__(self, inner: Attributor) -> None:
        self._inner = inner
        self._cache: dict[int, Attribution] = {}

    def __call__(self, pid: int) -> Attribution:
        hit = self._cache.get(pid)
        if hit is not None:
            return hit
        found = self._inner(pid)
        if found.mapped:
            self._cache[pid] = found
        return found

    def retain(self, live_pids: Iterable[int]) -> None:
        """Drop every cached PID not in ``live_pids`` (call once per sample)."""
        live = set(live_pids)
        for pid in [p for p in self._cache if p not in live]:
            del self._cache[pid]
