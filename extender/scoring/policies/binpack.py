"""Binpack: best fit on the GPU, most-allocated on the node.

place: the fitting GPUs with the least headroom (ties: lowest index).
score = 0.5 * chosen GPUs' fill after + 0.5 * node GPU-memory fill after   (0..1)
so a pod goes where it closes a gap, keeping whole GPUs free for whole-GPU pods.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.scoring import batch as nb
from extender.scoring.model import GpuDemand, GpuView, NodeView
from extender.scoring.policy import Context, best_fit, chosen_fill_after, node_fill_after


class Binpack:
    name = "binpack"

    def place(
        self, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
    ) -> tuple[GpuView, ...]:
        return best_fit(fitting, demand.count, ctx.limits)

    def score(
        self, node: NodeView, demand: GpuDemand, chosen: tuple[GpuView, ...], ctx: Context
    ) -> float:
        lim = ctx.limits
        return 0.5 * chosen_fill_after(demand, chosen, lim) + 0.5 * node_fill_after(
            node, demand, chosen, lim
        )

    def score_batch(
        self, b: nb.GpuBatch, demand: GpuDemand, hold: nb.Bools, ctx: Context
    ) -> nb.Floats:
        slots = nb.best_fit_slots(b, hold, demand.count, ctx.limits)
        return 0.5 * nb.chosen_fill_after(b, demand, slots) + 0.5 * nb.node_fill_after(
            b, demand, slots
        )
