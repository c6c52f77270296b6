"""Headroom (the project default): FGD's fragmentation delta, best fit to break its ties.

For the expected workload M (``ctx.mix``) and F(n) as in ``fgd.py`` (GiB of free memory
that the shapes of M cannot use, weighted by their shares):
    place: per unit, the fitting GPU minimising F after placement; ties: least headroom
           (best fit), then lowest index
    score = -(F_after - F_before) / GiB + TIE * fill_after(chosen GPUs)     (TIE = 1/64)
The tie term (< 1/64 GiB of fragmentation) only orders nodes FGD finds equal, towards the
fullest GPUs, so equal-fragmentation placements pack instead of landing at random.
Cost is not in this formula: ``framework.priorities`` blends the cost term, and
``narrowing.narrow`` keeps the filter's passing set to the best blended nodes so the
scheduler's integer rounding and random tie-break cannot undo the order.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.demand import GpuDemand
from extender.scoring.fit import unit_mib
from extender.scoring.model import GpuView, NodeView
from extender.scoring.policies.fgd import State, fragmentation, node_state
from extender.scoring.policy import Context, chosen_fill_after, node_fill_after

TIE = 1 / 64


class Headroom:
    name = "headroom"

    def place(
        self, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
    ) -> tuple[GpuView, ...]:
        m = ctx.limits.margin_mib
        if demand.mig_profile:
            return tuple(sorted(fitting, key=lambda g: g.index)[: demand.count])
        state, uuids = node_state(node, ctx.limits)
        slot = {u: i for i, u in enumerate(uuids)}
        chosen: list[GpuView] = []
        for _ in range(demand.count):
            best = min(
                (g for g in fitting if g not in chosen),
                key=lambda g: (_after(state, slot[g.uuid], g, demand, ctx), g.free_mib(m), g.index),
            )
            _take(state, slot[best.uuid], best, demand, ctx)
            chosen.append(best)
        return tuple(chosen)

    def score(
        self, node: NodeView, demand: GpuDemand, chosen: tuple[GpuView, ...], ctx: Context
    ) -> float:
        if demand.mig_profile:
            return 0.0
        state, uuids = node_state(node, ctx.limits)
        before = fragmentation(state, ctx.mix)
        slot = {u: i for i, u in enumerate(uuids)}
        for g in chosen:
            _take(state, slot[g.uuid], g, demand, ctx)
        delta_gib = (fragmentation(state, ctx.mix) - before) / 1024
        lim = ctx.limits
        fill = 0.5 * chosen_fill_after(demand, chosen, lim) + 0.5 * node_fill_after(
            node, demand, chosen, lim
        )
        return -delta_gib + TIE * fill


def _take(state: State, i: int, gpu: GpuView, demand: GpuDemand, ctx: Context) -> None:
    state[i] = (max(state[i][0] - unit_mib(gpu, demand, ctx.limits), 0), False)


def _after(state: State, i: int, gpu: GpuView, demand: GpuDemand, ctx: Context) -> float:
    trial = list(state)
    _take(trial, i, gpu, demand, ctx)
    return fragmentation(trial, ctx.mix)
