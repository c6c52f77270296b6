"""Usage rollup of one allocation: a bounded summary of every agent sample (pure).

Each sample is weighted by the time since that allocation's previous sample (for the
first one: since the allocation started, else was bound, else decided), capped at
``MAX_GAP_S`` so a silent agent or a restart does not let one sample stand for hours.
A sample at the same instant as the last (a duplicate report) weighs nothing; while
the total weight is zero the mean is simply the latest sample.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

MAX_GAP_S = 60.0


@dataclass(frozen=True)
class Rollup:
    count: int = 0
    peak_mib: int = 0
    mean_mib: float = 0.0
    weight_s: float = 0.0
    mean_sm: float | None = None
    sm_weight_s: float = 0.0
    last_at: float | None = None
    last_mib: int = 0


def fold(
    r: Rollup,
    used_mib: int,
    sm_util: float | None,
    at: float,
    since: float,
    max_gap: float = MAX_GAP_S,
) -> Rollup:
    """Add one sample taken at ``at``; ``since`` is the allocation's start time."""
    prev = r.last_at if r.last_at is not None else since
    w = min(max(at - prev, 0.0), max_gap)
    weight = r.weight_s + w
    mean = (r.mean_mib * r.weight_s + used_mib * w) / weight if weight > 0 else float(used_mib)
    out = replace(
        r,
        count=r.count + 1,
        peak_mib=max(r.peak_mib, used_mib),
        mean_mib=mean,
        weight_s=weight,
        last_at=max(at, r.last_at or at),
        last_mib=used_mib,
    )
    if sm_util is None:
        return out
    sm_weight = r.sm_weight_s + w
    old = r.mean_sm or 0.0
    sm = (old * r.sm_weight_s + sm_util * w) / sm_weight if sm_weight > 0 else float(sm_util)
    return replace(out, mean_sm=sm, sm_weight_s=sm_weight)
