"""Binpack: best fit on the GPU, most-allocated on the node.

place: the fitting GPUs with the least headroom (ties: lowest index).
score = 0.5 * chosen GPUs' fill after + 0.5 * node fill after   (0..1)
node fill = host_fill_after: GPU memory and CPU together (GPU alone when CPU is unknown),
so a pod goes where it closes a gap, keeping whole GPUs free for whole-GPU pods, and
best fit measures the node's leftover over GPU and CPU, not GPU alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from extender.scoring import batch as nb
from extender.scoring.model import GpuDemand, GpuView, NodeView
from extender.scoring.policy import (
    Context,
    best_fit,
    chosen_fill_after,
    host_fill_after,
    node_fill_after,
)


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
        node_fill = host_fill_after(node, demand, node_fill_after(node, demand, chosen, lim))
        return 0.5 * chosen_fill_after(demand, chosen, lim) + 0.5 * node_fill

    def score_batch(
        self, b: nb.GpuBatch, demand: GpuDemand, hold: nb.Bools, ctx: Context
    ) -> nb.Floats:
        slots = nb.best_fit_slots(b, hold, demand.count, ctx.limits)
        rows = np.arange(len(b))
        node_fill = nb.host_fill_at(b, nb.node_fill_after(b, demand, slots), demand, rows)
        return 0.5 * nb.chosen_fill_after(b, demand, slots) + 0.5 * node_fill
