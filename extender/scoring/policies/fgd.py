"""FGD: fragmentation gradient descent (Weng et al., "Beware of Fragmentation", ATC'23).

For the expected workload M (shapes m with shares p_m), a node's fragmentation is
    F(n) = sum_m p_m * F_m(n)
    F_m(n) = all free GPU memory on n, if n cannot host m at all;
             else the free memory on GPUs that cannot host one unit of m
(a whole-GPU shape can only use idle GPUs). The pod goes where it grows F the least:
    place: greedily, per unit, the fitting GPU minimising F after placement
    score = -(F_after - F_before) in GiB
Placing on one GPU changes only that GPU's term, so F after a trial placement is
computed from per-shape aggregates in O(1) instead of re-walking the node.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.scoring import batch as nb
from extender.scoring.fit import unit_mib
from extender.scoring.fragmentation import greedy_scores
from extender.scoring.model import GpuView, Limits, NodeView
from extender.scoring.policy import Context, Shape, by_index
from extender.state.demand import GpuDemand

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


class _Aggregates:
    """Per shape: (hosts, unusable, total) so one GPU's change is scored in O(1)."""

    def __init__(self, state: State, mix: Sequence[tuple[Shape, float]]) -> None:
        self.total = sum(f for f, _ in state)
        self.rows: list[tuple[int, int | None, float, int, int]] = []
        for (count, mem, profile), p in mix:
            if profile:
                continue
            if mem is None:
                hosts = sum(1 for _, idle in state if idle)
                unusable = sum(f for f, idle in state if not idle)
            else:
                hosts = sum(1 for f, _ in state if f >= mem)
                unusable = sum(f for f, _ in state if f < mem)
            self.rows.append((count, mem, p, hosts, unusable))

    def after(self, old: tuple[int, bool], new_free: int) -> float:
        """F once one GPU goes from ``old`` (free, idle) to ``new_free`` and not idle."""
        f, idle = old
        total = self.total - f + new_free
        frag = 0.0
        for count, mem, p, hosts, unusable in self.rows:
            if mem is None:
                h = hosts - idle
                u = unusable - (0 if idle else f) + new_free
            else:
                h = hosts - (f >= mem) + (new_free >= mem)
                u = unusable - (f if f < mem else 0) + (new_free if new_free < mem else 0)
            frag += p * (u if h >= count else total)
        return frag


class Fgd:
    name = "fgd"

    def place(
        self, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
    ) -> tuple[GpuView, ...]:
        if demand.mig_profile:
            return by_index(fitting, demand.count)
        state, uuids = node_state(node, ctx.limits)
        slot = {u: i for i, u in enumerate(uuids)}
        chosen: list[GpuView] = []
        for _ in range(demand.count):
            agg = _Aggregates(state, ctx.mix)

            def after(g: GpuView, agg: _Aggregates = agg) -> tuple[float, int]:
                old = state[slot[g.uuid]]
                return agg.after(old, max(old[0] - unit_mib(g, demand, ctx.limits), 0)), g.index

            best = min((g for g in fitting if g not in chosen), key=after)
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

    def score_batch(
        self, b: nb.GpuBatch, demand: GpuDemand, hold: nb.Bools, ctx: Context
    ) -> nb.Floats:
        return self.evaluate_rows(b, None, demand, ctx)[1]  # hold: its own test

    def evaluate_rows(
        self, b: nb.GpuBatch, rows: nb.Ints | None, demand: GpuDemand, ctx: Context
    ) -> tuple[nb.Bools, nb.Floats]:
        return greedy_scores(b, rows, demand, ctx.limits, ctx.mix, tie_by_free=False, tie=0.0)
