"""Spread: worst fit on the GPU, least-allocated on the node.

place: the fitting GPUs with the most headroom (ties: lowest index).
score = 1 - node GPU-memory fill after   (0..1)
Trades fragmentation for fewer noisy neighbours per card.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.demand import GpuDemand
from extender.scoring.model import GpuView, NodeView
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
