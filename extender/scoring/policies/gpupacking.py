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

import numpy as np

from extender.scoring import batch as nb
from extender.scoring.model import GpuDemand, GpuView, NodeView
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

    def score_batch(
        self, b: nb.GpuBatch, demand: GpuDemand, hold: nb.Bools, ctx: Context
    ) -> nb.Floats:
        slots = nb.best_fit_slots(b, hold, demand.count, ctx.limits)
        busy = b.present & ~b.idle(ctx.limits)
        only_busy = nb.picked(busy, slots).all(axis=0)
        tier = np.where(only_busy, 2, np.where(busy.any(axis=0) | b.mig_busy, 1, 0))
        return tier + 0.5 * nb.chosen_fill_after(b, demand, slots)


def packing_tier(node: NodeView, chosen: Sequence[GpuView], ctx: Context) -> int:
    """2: only busy GPUs used; 1: idle GPUs on a busy node; 0: the node was empty."""
    idle = ctx.limits.idle_mib
    if all(not g.idle(idle) for g in chosen):
        return 2
    if any(not g.idle(idle) for g in node.gpus):
        return 1
    return 0
