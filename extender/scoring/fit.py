"""Which GPUs on a node can hold one unit of a pod's demand (the Filter step).

Whole-GPU demands need idle GPUs; memory demands need headroom >= the ask on each of
``count`` distinct GPUs; MIG demands need idle instances of that profile.
"""

from __future__ import annotations

from extender.scoring.model import GpuDemand, GpuView, Limits, NodeView, Overrun


def unit_mib(gpu: GpuView, demand: GpuDemand, limits: Limits) -> int:
    """Memory one unit of the demand takes on this GPU (a whole GPU takes all of it)."""
    if demand.memory_mib is None:
        return gpu.total_mib
    return demand.memory_mib


def can_hold(gpu: GpuView, demand: GpuDemand, limits: Limits) -> bool:
    if demand.mig_profile:
        return gpu.mig_profile == demand.mig_profile and gpu.idle(limits.idle_mib)
    if gpu.mig_profile:
        return False
    if demand.memory_mib is None:
        return gpu.idle(limits.idle_mib)
    return gpu.free_mib(limits.margin_mib) >= demand.memory_mib


def fitting_gpus(node: NodeView, demand: GpuDemand, limits: Limits) -> list[GpuView]:
    return [g for g in node.gpus if can_hold(g, demand, limits)]


def shortfall_reason(node: NodeView, demand: GpuDemand, limits: Limits, fitting: int) -> str:
    """A reason a person can act on, naming the best GPU and what it lacks."""
    want = demand.count
    if not node.gpus:
        return "node reports no GPUs"
    if demand.mig_profile:
        same = [g for g in node.gpus if g.mig_profile == demand.mig_profile]
        note = overrun_note(next((g for g in same if g.overruns), None))
        return (
            f"{fitting} idle MIG {demand.mig_profile} instance(s) of {len(same)} < {want} asked"
            + note
        )
    plain = [g for g in node.gpus if not g.mig_profile]
    if not plain:
        return "all GPUs on the node are in MIG mode; ask for a nvidia.com/mig-<profile>"
    best = max(plain, key=lambda g: g.free_mib(limits.margin_mib))
    free_gib = max(best.free_mib(limits.margin_mib), 0) / 1024
    if demand.memory_mib is None:
        return (
            f"{fitting} idle GPU(s) < {want} whole GPU(s) asked; best {_short(best.uuid)} "
            f"has {free_gib:.1f} GiB free of {best.total_mib / 1024:.0f} GiB"
        ) + overrun_note(best)
    return (
        f"{fitting} GPU(s) with {demand.memory_mib / 1024:.1f} GiB free < {want} asked; "
        f"best {_short(best.uuid)}: {free_gib:.1f} GiB free < {demand.memory_mib / 1024:.1f} GiB"
    ) + overrun_note(best)


def overrun_note(gpu: GpuView | None) -> str:
    """The GPU's largest overrun as a clause for a refusal (``; pod ns/name uses X GiB of
    its Y GiB grant (+Z GiB)``), so it names who holds the memory: the fix is that pod's
    limit, not more GPUs. "" when nobody on the GPU is over their grant."""
    if gpu is None or not gpu.overruns:
        return ""
    top, more = gpu.overruns[0], len(gpu.overruns) - 1
    also = f" (and {more} more pod(s) over their grant)" if more else ""
    return f"; {describe_overrun(top)}{also}"


def describe_overrun(o: Overrun) -> str:
    if o.granted_mib == 0:
        return f"pod {o.pod} uses {o.used_mib / 1024:.1f} GiB with no grant on this GPU"
    return (
        f"pod {o.pod} uses {o.used_mib / 1024:.1f} GiB of its {o.granted_mib / 1024:.1f} GiB "
        f"grant (+{o.excess_mib / 1024:.1f} GiB)"
    )


def _short(uuid: str) -> str:
    return uuid[:12] + "…" if len(uuid) > 13 else uuid
