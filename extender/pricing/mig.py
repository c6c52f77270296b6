"""What share of its parent GPU's price a MIG instance pays (pure).

A MIG-capable GPU is split into 8 memory slices (A100, H100, H200, B200; the A30's 4
slices are 2 of these eighths each), and every profile takes a whole number of them:
on an H100 80GB ``1g.10gb`` takes 1 of 8, ``1g.20gb`` and ``2g.20gb`` 2, ``3g.40gb`` and
``4g.40gb`` 4, ``7g.80gb`` all 8 (NVIDIA MIG User Guide, "Supported MIG Profiles").
The memory slices are what an instance keeps from everyone else, so they set its
share: ``share = slices / 8``, where ``slices = round(8 * profile GB / parent GB)``
(1..8). The profile's own name carries its size in GB, so instances of one profile cost
the same on every card of a model, whatever NVML reports as their usable MiB.

Not billed by compute slices: ``3g.40gb`` and ``4g.40gb`` hold the same memory and
exclude the same memory from others; memory is headroom's billing anchor. A profile
whose name does not read ``<n>g.<m>gb`` is billed by the instance's memory over the
parent's (``instance MiB / parent MiB``), the same rule for any other layout.
Eight instances of ``1g.10gb`` together pay exactly the parent's price; idle slices
are paid by nobody and show as the node's idle GPU cost.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal

SLICES = 8
_PROFILE = re.compile(r"^(?:\d+c\.)?(\d+)g\.(\d+(?:\.\d+)?)gb(?:\+\w+)*$")
MIB_PER_GB = Decimal(1024)


def profile_gb(profile: str) -> Decimal | None:
    """The memory a profile name states (``1g.10gb`` -> 10), or None if it states none."""
    m = _PROFILE.match(profile.strip().lower())
    return Decimal(m.group(2)) if m else None


def memory_slices(profile: str, parent_mib: int) -> int | None:
    """Memory slices (of 8) the profile takes on a parent of ``parent_mib``; None when
    the name gives no size or the parent's size is unknown."""
    gb = profile_gb(profile)
    if gb is None or parent_mib <= 0:
        return None
    parent_gb = Decimal(parent_mib) / MIB_PER_GB
    slices = int((SLICES * gb / parent_gb).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
    return min(max(slices, 1), SLICES)


def mig_share(profile: str, instance_mib: int, parent_mib: int) -> Decimal:
    """The instance's share of its parent GPU's price: slices / 8, else memory over the
    parent's memory; 1 (the whole GPU) when the parent's size is unknown (an agent
    always reports it: this only guards hand-made data)."""
    slices = memory_slices(profile, parent_mib)
    if slices is not None:
        return Decimal(slices) / SLICES
    if parent_mib <= 0 or instance_mib <= 0:
        return Decimal(1)
    return min(Decimal(instance_mib) / Decimal(parent_mib), Decimal(1))
