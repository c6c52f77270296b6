"""Headroom (the project default): FGD's fragmentation delta and the GPU memory stranded
behind CPU and host memory, best fit to break their ties.

For the expected workload M (``ctx.mix``) and F as in ``fgd.py`` (defined once, in
``extender.scoring.fragmentation``):
    place: per unit, the fitting GPU minimising F after placement; ties: least headroom
           (best fit), then lowest index
    score = -(F_after - F_before) / GiB - STRANDING * (S_after - S_before) / GiB
            + TIE * (0.5 * fill_after(chosen GPUs) + 0.5 * fill_after(node's GPUs))
    STRANDING = 1 (a GiB stranded counts as a GiB fragmented), TIE = 1/64
S (``extender.scoring.stranding``) is the node's free GPU memory that its free CPU or host
memory cannot serve at the mix's CPU and memory per GPU-MiB. F counts the whole node (a
GPU on a node without the CPU or memory a shape needs is fragmented for it), but only once
it has happened; S sees it coming: it sends a CPU-hungry pod to a node with CPU to spare
for its GPUs and a CPU-light one where CPU is short, and is 0 wherever the host keeps up,
so there cost and packing decide (on the openb trace and the synthetic cluster:
docs/scheduling.md).
The tie term (< 1/64 GiB of fragmentation) only orders placements FGD finds equal (a
whole GPU taken from any node with idle GPUs changes F by 0), towards the fullest GPU and
node, so equal-fragmentation pods pack instead of spreading or landing at random. It
measures GPU memory only: CPU is S's to weigh. A CPU fill in it (tried) ranks nodes by
CPU wherever S is 0, ahead of cost; both ways are measured in docs/scheduling.md.
Cost is not in this formula: ``framework.priorities`` blends the cost term, and
``narrowing.narrow`` keeps the filter's passing set to the best blended nodes so the
scheduler's integer rounding, in-tree scores and random ties cannot undo the order.
MIG demands take the lowest-index idle instances and score 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.scoring import batch as nb
from extender.scoring.fit import unit_mib
from extender.scoring.fragmentation import fragmentation_delta, greedy_place, greedy_scores
from extender.scoring.hostonly import host_scores
from extender.scoring.model import GpuDemand, GpuView, NodeView
from extender.scoring.policy import (
    Context,
    by_index,
    chosen_fill_after,
    node_fill_after,
)
from extender.scoring.stranding import node_stranding_delta

TIE = 1 / 64
STRANDING = 1.0


class Headroom:
    name = "headroom"

    def place(
        self, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
    ) -> tuple[GpuView, ...]:
        if demand.mig_profile:
            return by_index(fitting, demand.count)
        return greedy_place(node, demand, fitting, ctx.limits, ctx.mix, tie_by_free=True)

    def score(
        self, node: NodeView, demand: GpuDemand, chosen: tuple[GpuView, ...], ctx: Context
    ) -> float:
        if demand.mig_profile:
            return 0.0
        lim = ctx.limits
        delta_gib = fragmentation_delta(node, demand, chosen, lim, ctx.mix) / 1024
        gpu_fill = node_fill_after(node, demand, chosen, lim)
        fill = 0.5 * chosen_fill_after(demand, chosen, lim) + 0.5 * gpu_fill
        added = sum(unit_mib(g, demand, lim) for g in chosen)
        strand = node_stranding_delta(node, demand, added, lim, tuple(ctx.mix))
        return -delta_gib - STRANDING * strand + TIE * fill

    def score_batch(
        self, b: nb.GpuBatch, demand: GpuDemand, hold: nb.Bools, ctx: Context
    ) -> nb.Floats:
        return self.evaluate_rows(b, None, demand, ctx)[1]  # hold: its own test

    def evaluate_rows(
        self, b: nb.GpuBatch, rows: nb.Ints | None, demand: GpuDemand, ctx: Context
    ) -> tuple[nb.Bools, nb.Floats]:
        return greedy_scores(
            b, rows, demand, ctx.limits, ctx.mix, tie_by_free=True, tie=TIE, stranding=STRANDING
        )

    def score_host_rows(
        self, b: nb.GpuBatch, rows: nb.Ints, demand: GpuDemand, ctx: Context
    ) -> nb.Floats:
        return host_scores(b, rows, demand, ctx.limits, ctx.mix, stranding=STRANDING)
