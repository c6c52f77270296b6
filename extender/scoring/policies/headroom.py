"""Headroom (the project default): FGD's fragmentation delta, best fit to break its ties.

For the expected workload M (``ctx.mix``, shapes m with shares p_m) and, as in ``fgd.py``,
    F(n) = sum_m p_m * F_m(n),  F_m(n) = all free memory if n cannot host m, else the free
           memory on GPUs that cannot host one unit of m:
    place: per unit, the fitting GPU minimising F after placement; ties: least headroom
           (best fit), then lowest index
    score = -(F_after - F_before) / GiB + TIE * (0.5 * fill_after(chosen GPUs)
                                                 + 0.5 * fill_after(node))     TIE = 1/64
The tie term (< 1/64 GiB of fragmentation) only orders placements FGD finds equal (a
whole GPU taken from any node with idle GPUs changes F by 0), towards the fullest GPU and
node, so equal-fragmentation pods pack instead of spreading or landing at random.
Cost is not in this formula: ``framework.priorities`` blends the cost term, and
``narrowing.narrow`` keeps the filter's passing set to the best blended nodes so the
scheduler's integer rounding, in-tree scores and random ties cannot undo the order.

Speed (this runs for every pod x node): F_m is kept as per-shape counters (GPUs that can
host m, their free memory), so trying a GPU costs O(|M|), not O(|M| x GPUs); the values
equal ``fgd.fragmentation`` exactly (integer MiB per shape, summed in mix order).
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.scoring import batch as nb
from extender.scoring.fit import unit_mib
from extender.scoring.fragmentation import greedy_scores
from extender.scoring.model import GpuView, NodeView
from extender.scoring.policies.fgd import State, node_state
from extender.scoring.policy import Context, Shape, by_index, chosen_fill_after, node_fill_after
from extender.state.demand import GpuDemand

TIE = 1 / 64


class Headroom:
    name = "headroom"

    def place(
        self, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
    ) -> tuple[GpuView, ...]:
        if demand.mig_profile:
            return by_index(fitting, demand.count)
        m = ctx.limits.margin_mib
        state, uuids = node_state(node, ctx.limits)
        frag = Fragmentation(state, ctx.mix)
        slot = {u: i for i, u in enumerate(uuids)}
        chosen: list[GpuView] = []
        left = list(fitting)
        for _ in range(demand.count):
            trials = [
                (g, slot[g.uuid], _taken(frag.state, slot[g.uuid], g, demand, ctx)) for g in left
            ]
            best, i, new = min(
                trials, key=lambda t: (frag.value_if(t[1], t[2]), t[0].free_mib(m), t[0].index)
            )
            frag.set(i, new)
            chosen.append(best)
            left.remove(best)
        return tuple(chosen)

    def score(
        self, node: NodeView, demand: GpuDemand, chosen: tuple[GpuView, ...], ctx: Context
    ) -> float:
        if demand.mig_profile:
            return 0.0
        lim = ctx.limits
        state, uuids = node_state(node, lim)
        frag = Fragmentation(state, ctx.mix)
        before = frag.value()
        slot = {u: i for i, u in enumerate(uuids)}
        for g in chosen:
            i = slot[g.uuid]
            frag.set(i, _taken(frag.state, i, g, demand, ctx))
        delta_gib = (frag.value() - before) / 1024
        fill = 0.5 * chosen_fill_after(demand, chosen, lim) + 0.5 * node_fill_after(
            node, demand, chosen, lim
        )
        return -delta_gib + TIE * fill

    def score_batch(
        self, b: nb.GpuBatch, demand: GpuDemand, hold: nb.Bools, ctx: Context
    ) -> nb.Floats:
        return self.evaluate_rows(b, None, demand, ctx)[1]  # hold: its own test

    def evaluate_rows(
        self, b: nb.GpuBatch, rows: nb.Ints | None, demand: GpuDemand, ctx: Context
    ) -> tuple[nb.Bools, nb.Floats]:
        return greedy_scores(b, rows, demand, ctx.limits, ctx.mix, tie_by_free=True, tie=TIE)


def _taken(state: State, i: int, gpu: GpuView, demand: GpuDemand, ctx: Context) -> tuple[int, bool]:
    """GPU i's (free, idle) once one unit of the demand sits on it."""
    return (max(state[i][0] - unit_mib(gpu, demand, ctx.limits), 0), False)


class Fragmentation:
    """F(n) of a node's plain-GPU state with per-shape counters, updatable per GPU.

    For shape m = (count, mem, profile): hosts(g) = idle(g) if mem is None else free(g) >= mem;
    F_m = total free - free on hosting GPUs if #hosting >= count, else total free; MIG
    shapes count 0 (as in ``fgd.task_fragment``).
    """

    __slots__ = ("free", "hosting", "p", "shapes", "state", "total")

    def __init__(self, state: State, mix: Sequence[tuple[Shape, float]]) -> None:
        self.state = state
        self.shapes = [(c, mem, bool(prof)) for (c, mem, prof), _ in mix]
        self.p = [p for _, p in mix]
        self.total = sum(f for f, _ in state)
        self.hosting = [0] * len(self.shapes)
        self.free = [0] * len(self.shapes)
        for k, (_, mem, _) in enumerate(self.shapes):
            for f, idle in state:
                if idle if mem is None else f >= mem:
                    self.hosting[k] += 1
                    self.free[k] += f

    def value(self) -> float:
        return self._value(self.hosting, self.free, self.total)

    def value_if(self, i: int, new: tuple[int, bool]) -> float:
        """F(n) if GPU i's (free, idle) became ``new``."""
        hosting, free = list(self.hosting), list(self.free)
        self._move(hosting, free, self.state[i], new)
        return self._value(hosting, free, self.total - self.state[i][0] + new[0])

    def set(self, i: int, new: tuple[int, bool]) -> None:
        self._move(self.hosting, self.free, self.state[i], new)
        self.total += new[0] - self.state[i][0]
        self.state[i] = new

    def _move(
        self, hosting: list[int], free: list[int], old: tuple[int, bool], new: tuple[int, bool]
    ) -> None:
        for k, (_, mem, _) in enumerate(self.shapes):
            if old[1] if mem is None else old[0] >= mem:
                hosting[k] -= 1
                free[k] -= old[0]
            if new[1] if mem is None else new[0] >= mem:
                hosting[k] += 1
                free[k] += new[0]

    def _value(self, hosting: list[int], free: list[int], total: int) -> float:
        f = 0.0
        for k, (count, _, mig) in enumerate(self.shapes):
            if mig:
                frag = 0
            elif hosting[k] >= count:
                frag = total - free[k]
            else:
                frag = total
            f += self.p[k] * frag
        return f
