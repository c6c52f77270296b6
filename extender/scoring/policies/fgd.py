"""FGD: fragmentation gradient descent (Weng et al., "Beware of Fragmentation", ATC'23).

For the expected workload M (shapes m with shares p_m), a node's fragmentation is
    F(n) = sum_m p_m * F_m(n)
    F_m(n) = all free GPU memory on n, if n cannot host m at all;
             else the free memory on GPUs that cannot host one unit of m
(a whole-GPU shape can only use idle GPUs). The pod goes where it grows F the least:
    place: greedily, per unit, the fitting GPU minimising F after placement
    score = -(F_after - F_before) in GiB
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.demand import GpuDemand
from extender.scoring.fit import unit_mib
from extender.scoring.model import GpuView, Limits, NodeView
from extender.scoring.policy import Context, Shape

State = list[tuple[int, bool]]  # per plain GPU: (free MiB >= 0, idle)


def task_fragment(state: State, shape: Shape) -> int:
    """F_m(n) for one shape, in MiB."""
    count, mem, profile = shape
    if profile:
        return 0  # MIG instances are fixed partitions, outside this measure
    total = sum(f for f, _ in state)
    if mem is None:
        if sum(1 for _, idle in state if idle) >= count:
            return sum(f for f, idle in state if not idle)
        return total
    if sum(1 for f, _ in state if f >= mem) >= count:
        return sum(f for f, _ in state if f < mem)
    return total


def fragmentation(state: State, mix: Sequence[tuple[Shape, float]]) -> float:
    return sum(p * task_fragment(state, shape) for shape, p in mix)


def node_state(node: NodeView, lim: Limits) -> tuple[State, list[str]]:
    plain = [g for g in node.gpus if not g.mig_profile]
    state = [(max(g.free_mib(lim.margin_mib), 0), g.idle(lim.idle_mib)) for g in plain]
    return state, [g.uuid for g in plain]


class Fgd:
    name = "fgd"

    def place(
        self, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
    ) -> tuple[GpuView, ...]:
        if demand.mig_profile:
            return tuple(sorted(fitting, key=lambda g: g.index)[: demand.count])
        state, uuids = node_state(node, ctx.limits)
        slot = {u: i for i, u in enumerate(uuids)}
        chosen: list[GpuView] = []
        for _ in range(demand.count):
            best = min(
                (g for g in fitting if g not in chosen),
                key=lambda g: (self._after(state, slot[g.uuid], g, demand, ctx), g.index),
            )
            i = slot[best.uuid]
            state[i] = (max(state[i][0] - unit_mib(best, demand, ctx.limits), 0), False)
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
            i = slot[g.uuid]
            state[i] = (max(state[i][0] - unit_mib(g, demand, ctx.limits), 0), False)
        return -(fragmentation(state, ctx.mix) - before) / 1024

    @staticmethod
    def _after(state: State, i: int, gpu: GpuView, demand: GpuDemand, ctx: Context) -> float:
        trial = list(state)
        trial[i] = (max(trial[i][0] - unit_mib(gpu, demand, ctx.limits), 0), False)
        return fragmentation(trial, ctx.mix)
