"""Builders of plain decisions for the ledger tests."""

from __future__ import annotations

from decimal import Decimal

from extender.core.allocation import Decision, GpuGrant, NodeRef, PodRef, Sharing

GIB = 1024
NODE = NodeRef("node-a", "p5.48xlarge", "on-demand", "us-east-1a", "gpu")


def grant(
    gpu: str, mib: int, total: int = 80 * GIB, node_price: str = "4.00", index: int = 0
) -> GpuGrant:
    """A slice priced as the extender prices it: node GPU $/h * granted / total."""
    price = Decimal(node_price) * mib / total
    sharing = Sharing.EXCLUSIVE if mib == total else Sharing.SHARED
    return GpuGrant(gpu, index, "H100", mib, total, sharing, price)


def decision(
    uid: str,
    *grants: GpuGrant,
    at: float,
    ns: str = "team-a",
    node: NodeRef = NODE,
    labels: dict[str, str] | None = None,
    name: str | None = None,
) -> Decision:
    pod = PodRef(uid, ns, name or f"pod-{uid}", "Job", "train", labels or {})
    return Decision(pod, node, tuple(grants) or (grant("GPU-0", 20 * GIB),), at, "cheapest")
