"""Placement policies by name."""

from extender.scoring.policies.binpack import Binpack
from extender.scoring.policies.fgd import Fgd
from extender.scoring.policies.gpupacking import GpuPacking
from extender.scoring.policies.headroom import Headroom
from extender.scoring.policies.spread import Spread
from extender.scoring.policy import Policy

POLICIES: dict[str, type] = {
    "binpack": Binpack,
    "spread": Spread,
    "fgd": Fgd,
    "gpu-packing": GpuPacking,
    "headroom": Headroom,
}


def policy_by_name(name: str) -> Policy:
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}") from None
    policy: Policy = cls()
    return policy


__all__ = ["POLICIES", "Binpack", "Fgd", "GpuPacking", "Headroom", "Spread", "policy_by_name"]
