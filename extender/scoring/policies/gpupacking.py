"""GPU packing (the "GpuPacking" baseline of Weng et al., ATC'23): used GPUs, then used nodes.

tier = 2 if every chosen GPU is already in use (shares a busy card),
       1 if the node is in use but the pod needs idle GPUs on it,
       0 if the node is empty (the pod opens it)
place: the fitting GPUs with the least headroom (ties: lowest index), as best fit.
score = tier + 0.5 * chosen GPUs' fill after   (0..2.5)
so a pod opens an idle GPU only when no busy one can take it, and an empty node last.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.demand import GpuDemand
from extender.scoring.model import GpuView, NodeView
from extender.scoring.policy import Context, best_fit, chosen_fill_after


class GpuPacking:
    name = "gpu-packing"

    def place(
        self, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
    ) -> tuple[GpuView, ...]:
        return best_fit(fitting, demand.count, ctx.limits)

    def score(
        self, node: NodeView, demand: GpuDemand, chosen: tuple[GpuView, ...], ctx: Context
    ) -> float:
        return packing_tier(node, chosen, ctx) + 0.5 * chosen_fill_after(demand, chosen, ctx.limits)


def packing_tier(node: NodeView, chosen: Sequence[GpuView], ctx: Context) -> int:
    """2: only busy GPUs used; 1: idle GPUs on a busy node; 0: the node was empty."""
    idle = ctx.limits.idle_mib
    if all(not g.idle(idle) for g in chosen):
        return 2
    if any(not g.idle(idle) for g in node.gpus):
        return 1
    return 0
