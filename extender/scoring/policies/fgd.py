"""FGD: fragmentation gradient descent (Weng et al., "Beware of Fragmentation", ATC'23).

For the expected workload M (``ctx.mix``), F is the node's free GPU memory that M cannot
use (``extender.scoring.fragmentation``, the one definition):
    F(n) = sum_m p_m * F_m(n),  F_m(n) = all free memory if n cannot host m, else the free
           memory on GPUs that cannot host one unit of m
The pod goes where it grows F the least:
    place: greedily, per unit, the fitting GPU minimising F after placement (ties: lowest
           index)
    score = -(F_after - F_before) / GiB
MIG demands take the lowest-index idle instances and score 0: F leaves MIG out.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.scoring import batch as nb
from extender.scoring.fragmentation import fragmentation_delta, greedy_place, greedy_scores
from extender.scoring.hostonly import host_scores
from extender.scoring.model import GpuDemand, GpuView, NodeView
from extender.scoring.policy import Context, by_index


class Fgd:
    name = "fgd"

    def place(
        self, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
    ) -> tuple[GpuView, ...]:
        if demand.mig_profile:
            return by_index(fitting, demand.count)
        return greedy_place(node, demand, fitting, ctx.limits, ctx.mix, tie_by_free=False)

    def score(
        self, node: NodeView, demand: GpuDemand, chosen: tuple[GpuView, ...], ctx: Context
    ) -> float:
        if demand.mig_profile:
            return 0.0
        return -fragmentation_delta(node, demand, chosen, ctx.limits, ctx.mix) / 1024

    def score_batch(
        self, b: nb.GpuBatch, demand: GpuDemand, hold: nb.Bools, ctx: Context
    ) -> nb.Floats:
        return self.evaluate_rows(b, None, demand, ctx)[1]  # hold: its own test

    def evaluate_rows(
        self, b: nb.GpuBatch, rows: nb.Ints | None, demand: GpuDemand, ctx: Context
    ) -> tuple[nb.Bools, nb.Floats]:
        return greedy_scores(b, rows, demand, ctx.limits, ctx.mix, tie_by_free=False, tie=0.0)

    def score_host_rows(
        self, b: nb.GpuBatch, rows: nb.Ints, demand: GpuDemand, ctx: Context
    ) -> nb.Floats:
        return host_scores(b, rows, demand, ctx.limits, ctx.mix, stranding=0.0)
