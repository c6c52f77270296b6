"""An ongoing discrepancy is written when new, when it grows, and once a refresh period;
not at every agent report."""

from __future__ import annotations

from extender.core.allocation import EventKind
from extender.scheduling.discrepancies import Discrepancy
from extender.scheduling.throttle import DiscrepancyThrottle


def leak(amount: int, pod: str = "p1") -> Discrepancy:
    return Discrepancy(EventKind.LEAK, "n1", "GPU-1", pod, amount, "pid 7")


def test_a_steady_finding_is_written_once_a_refresh_period() -> None:
    t = DiscrepancyThrottle(refresh_s=60)
    written = [len(t.due([leak(100)], now)) for now in range(0, 200, 5)]
    assert written[0] == 1 and sum(written) == 4  # at 0, 60, 120, 180 s


def test_a_new_or_growing_finding_is_written_at_once() -> None:
    t = DiscrepancyThrottle(refresh_s=60)
    assert t.due([leak(100)], 0) == [leak(100)]
    assert t.due([leak(100), leak(50, pod="p2")], 5) == [leak(50, pod="p2")]
    assert t.due([leak(90)], 10) == []  # smaller: nothing new to say
    assert t.due([leak(300)], 15) == [leak(300)]


def test_ended_findings_are_forgotten() -> None:
    t = DiscrepancyThrottle(refresh_s=60)
    t.due([leak(1, pod=f"p{i}") for i in range(100)], 0)
    t.due([leak(1)], 1000)
    assert len(t._written) == 1
