"""Committed memory of one GPU (or MIG instance): what no new pod may take. Pure.

For one schedulable unit, from the grants the extender holds on it and the per-pod use
its agent last reported (``extender.wire.usage``, the one definition of both):

    committed = Σ_{pods granted on it} max(granted_i, used_i)
              + Σ_{pods using it without a grant} used_j
              + unattributed

- A granted pod holds its whole grant even while idle (it may fill its slice at any
  time), and more than its grant once it overran: the card's memory is already gone.
- A pod using the unit without a grant here (a *leak*: a container that sees every GPU,
  or a pod that bypassed the extender) occupies that memory all the same; it counts.
- Unattributed memory (driver reserve, processes mapped to no pod, processes whose size
  NVML could not tell) is held by nobody the extender can release; it counts too.
- A MIG instance is granted whole: any grant on it counts as the instance's memory.

The old rule, ``max(Σ used, Σ granted)``, let an overrun hide inside other pods' idle
slices: a pod granted 10 GiB using 30 GiB beside idle grants looked like 30 GiB taken
when the grants, once filled, need 50 (issue 24). Since each pod's term is at least its
use and unattributed is what the device uses beyond the pods, committed is at least the
device's measured use and at least Σ granted: the new rule never admits more than the old.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Excess:
    """A pod using more of the unit than it was granted (``granted_mib`` 0: no grant)."""

    pod_uid: str
    used_mib: int
    granted_mib: int


@dataclass(frozen=True, slots=True)
class Committed:
    mib: int
    excess: tuple[Excess, ...]  # largest excess first, then by pod UID


def committed(
    granted: Mapping[str, int],
    used: Mapping[str, int],
    unattributed_mib: int,
    *,
    whole_mib: int | None = None,
) -> Committed:
    """The unit's committed memory (formula in the module docstring) and the pods whose
    use exceeds their grant there. ``granted``/``used``: MiB per pod UID on this unit;
    ``whole_mib``: the unit's size when it is a MIG instance (a grant takes all of it)."""
    total = max(0, unattributed_mib)
    excess: list[Excess] = []
    for pod, mib in granted.items():
        grant = mib if whole_mib is None else whole_mib
        use = used.get(pod, 0)
        if use > grant:
            total += use
            excess.append(Excess(pod, use, grant))
        else:
            total += grant
    if len(used) > len(excess):  # some pod within its grant, or using it ungranted
        for pod, use in used.items():
            if pod not in granted:
                total += use
                if use > 0:
                    excess.append(Excess(pod, use, 0))
    if len(excess) > 1:
        excess.sort(key=lambda e: (e.granted_mib - e.used_mib, e.pod_uid))
    return Committed(total, tuple(excess))
