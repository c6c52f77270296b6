"""Where a pod that asks no GPU should go: off the CPU and memory that GPU pods will need.

kube-scheduler's in-tree scores spread a CPU-only pod over the least allocated nodes, GPU
nodes among them; each such pod takes CPU and memory that a node's idle GPUs may need, and
a GPU behind exhausted CPU or memory is stranded (the openb trace on all 1,523 nodes:
docs/scheduling.md). A policy that implements ``HostScorer`` scores these pods too:
    raw   = -(F after - F before) / GiB - balance x (imbalance after - imbalance before)
F is FGD's fragmentation (``fragmentation.host_delta``: GPUs the pod leaves without the
host room a shape of the mix needs); imbalance = |CPU fill - GPU fill| + |memory fill -
GPU fill| (``batch.imbalance_at``), counted only on nodes with GPUs. So a node whose GPUs
are busy and whose CPU would otherwise idle gains, a node with idle GPUs loses, and a node
without GPUs, or one the extender has no report of, is neutral (0). The reply's integers
come in two tiers (``host_priorities``), with no cost term (prices are per GPU memory).
"""

from __future__ import annotations

import numpy as np

from extender.scoring.batch import Floats, GpuBatch, Ints, imbalance_at, node_gpu_fill
from extender.scoring.fragmentation import Mix, host_delta
from extender.scoring.model import MAX_PRIORITY, GpuDemand, Limits

NOTHING = GpuDemand(0)
COSTLY_TOP = 5  # the best score a node where the pod costs something can get


def host_scores(
    b: GpuBatch, rows: Ints, demand: GpuDemand, lim: Limits, mix: Mix, balance: float
) -> Floats:
    """``raw`` per row of ``rows`` (-1: a node without a usable report, scored 0)."""
    raw = np.zeros(len(rows))
    known = rows >= 0
    if not known.any():
        return raw
    r = rows[known]
    delta = host_delta(b, r, demand, lim, mix)
    gpu_fill = node_gpu_fill(b, r)
    change = imbalance_at(b, gpu_fill, demand, r) - imbalance_at(b, gpu_fill, NOTHING, r)
    raw[known] = -(delta / 1024) - balance * np.where(b.node_total[r] > 0, change, 0.0)
    return raw


def host_priorities(raw: Floats) -> Ints:
    """The prioritize reply's integers for ``host_scores``, in two tiers: 10 where the pod
    costs nothing (raw >= 0: it strands no GPU and evens the node out, or the node has no
    GPUs), and 0..5 where it costs (raw < 0, min-max scaled among those). kube-scheduler
    adds 50 per point to its in-tree scores (weight 5 x 10; LeastAllocated +
    BalancedAllocation differ by at most 200), so the gap of 5 points (250) makes every
    costless node win over every costly one, and the in-tree scores choose within a tier.
    A min-max over all candidates did not: one node with a large loss rounded every small
    loss to 10, level with the costless nodes, and the in-tree scores then spread the pods
    over the GPU nodes (openb, all nodes, seed 1: 94.9 % with it, 95.9 % with the tiers)."""
    out = np.full(len(raw), MAX_PRIORITY, dtype=np.int64)
    costly = raw < 0
    if costly.any():
        lo, hi = raw[costly].min(), raw[costly].max()
        scaled = (raw[costly] - lo) / (hi - lo) if hi > lo else np.ones(int(costly.sum()))
        out[costly] = np.rint(COSTLY_TOP * scaled).astype(np.int64)
    return out
