"""Baselines that make no sense in production but follow the per-node half of the policy
protocol (``NodePolicy``: place and score, no vectorised score).

Random:  place random fitting GPUs; score = U(0, 1)          (seeded)
DotProduct (Tetris, Grandl et al. SIGCOMM'14, as in the FGD authors' simulator, which
prefers the smallest product):
    d = (pod GPU memory / node GPU memory, pod GPUs / node GPUs)
    r = (free GPU memory / node GPU memory, idle GPUs / node GPUs)        before placement
    place: best fit (least headroom, then lowest index); score = 1 - d . r / 2
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from extender.scoring.fit import unit_mib
from extender.scoring.model import GpuView, NodeView
from extender.scoring.policy import Context
from extender.state.demand import GpuDemand


class RandomFit:
    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def place(
        self, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
    ) -> tuple[GpuView, ...]:
        return tuple(self._rng.sample(list(fitting), demand.count))

    def score(
        self, node: NodeView, demand: GpuDemand, chosen: tuple[GpuView, ...], ctx: Context
    ) -> float:
        return self._rng.random()


class DotProduct:
    name = "dot-product"

    def place(
        self, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
    ) -> tuple[GpuView, ...]:
        m = ctx.limits.margin_mib
        return tuple(sorted(fitting, key=lambda g: (g.free_mib(m), g.index))[: demand.count])

    def score(
        self, node: NodeView, demand: GpuDemand, chosen: tuple[GpuView, ...], ctx: Context
    ) -> float:
        lim = ctx.limits
        total, n = max(node.total_mib, 1), max(len(node.gpus), 1)
        d = (sum(unit_mib(g, demand, lim) for g in chosen) / total, demand.count / n)
        free = sum(max(g.free_mib(lim.margin_mib), 0) for g in node.gpus)
        idle = sum(1 for g in node.gpus if g.idle(lim.idle_mib))
        r = (free / total, idle / n)
        return 1.0 - (d[0] * r[0] + d[1] * r[1]) / 2
