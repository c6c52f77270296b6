"""Spread: worst fit on the GPU, least-allocated on the node.

place: the fitting GPUs with the most headroom (ties: lowest index).
score = 1 - node GPU-memory fill after   (0..1)
Trades fragmentation for fewer noisy neighbours per card.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.scoring import batch as nb
from extender.scoring.model import GpuDemand, GpuView, NodeView
from extender.scoring.policy import Context, node_fill_after


class Spread:
    name = "spread"

    def place(
        self, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
    ) -> tuple[GpuView, ...]:
        m = ctx.limits.margin_mib
        ordered = sorted(fitting, key=lambda g: (-g.free_mib(m), g.index))
        return tuple(ordered[: demand.count])

    def score(
        self, node: NodeView, demand: GpuDemand, chosen: tuple[GpuView, ...], ctx: Context
    ) -> float:
        return 1.0 - node_fill_after(node, demand, chosen, ctx.limits)

    def score_batch(
        self, b: nb.GpuBatch, demand: GpuDemand, hold: nb.Bools, ctx: Context
    ) -> nb.Floats:
        slots = nb.ordered_slots(-b.free(ctx.limits), hold, demand.count)
        return 1.0 - nb.node_fill_after(b, demand, slots)
