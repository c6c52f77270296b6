"""What one policy's run measured, and the two tables ``headroom simulate`` prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from extender.core.table import align


@dataclass
class PolicyResult:
    policy: str
    placed: int
    unplaceable: int
    allocation_rate: float  # granted / total GPU memory when arrivals end
    fragmentation: float  # share of free GPU memory the workload mix cannot use
    idle_gpus: int
    cluster_usd_per_hour: float  # nodes holding at least one pod (what Karpenter keeps)
    usd_per_gib_hour: float  # node cost over the run / GiB-hours granted
    on_demand_pods_on_spot: int
    ledger: str
    # the run's chargeback from its ledger, by namespace: USD as strings (exact)
    charges: dict[str, str] = field(default_factory=dict)
    idle_usd: str = "0"
    gpu_bill_usd: str = "0"  # the nodes' GPU cost over the run = charges + idle
    reports: int = 0  # agent reports the run sent (on change, and before going stale)


def policy_table(results: list[PolicyResult]) -> str:
    head = (
        "policy",
        "placed",
        "unplaceable",
        "GPU mem alloc",
        "fragmentation",
        "idle GPUs",
        "$/h in use",
        "$/GiB-h",
        "on-demand pods on spot",
    )
    rows = [
        (
            r.policy,
            str(r.placed),
            str(r.unplaceable),
            f"{r.allocation_rate:.1%}",
            f"{r.fragmentation:.1%}",
            str(r.idle_gpus),
            f"{r.cluster_usd_per_hour:,.2f}",
            f"{r.usd_per_gib_hour:.4f}",
            str(r.on_demand_pods_on_spot),
        )
        for r in results
    ]
    return align([head, *rows], right_from=1, rule=True)


def chargeback_table(results: list[PolicyResult]) -> str:
    """USD per namespace for each policy's run; charges + idle must equal the GPU bill."""
    namespaces = sorted({ns for r in results for ns in r.charges})
    head = ["chargeback (USD)", *(r.policy for r in results)]
    rows = [[ns, *(r.charges.get(ns, "0.00") for r in results)] for ns in namespaces]
    rows.append(["idle (granted to no pod)", *(r.idle_usd for r in results)])
    rows.append(["= GPU bill of the nodes", *(r.gpu_bill_usd for r in results)])
    balanced = all(
        sum(Decimal(v) for v in r.charges.values()) + Decimal(r.idle_usd) == Decimal(r.gpu_bill_usd)
        for r in results
    )
    check = "charges + idle = GPU bill, to the cent" if balanced else "MISMATCH: charges + idle"
    return align([head, *rows], right_from=1, rule=True) + f"\n{check}"
