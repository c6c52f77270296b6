"""Where a pod that asks no GPU should go: off the CPU and memory that GPU pods will need.

kube-scheduler's in-tree scores spread a CPU-only pod over the least allocated nodes, GPU
nodes among them; each such pod takes CPU and memory that a node's idle GPUs may need, and
a GPU behind exhausted CPU or memory is stranded (the openb trace on all 1,523 nodes:
docs/scheduling.md). A policy that implements ``HostScorer`` scores these pods too:
    raw   = -(F after - F before) / GiB - stranding x (S after - S before) / GiB
F is FGD's fragmentation (``fragmentation.host_delta``: GPUs the pod leaves without the
host room a shape of the mix needs); S is the GPU memory the node's CPU and host memory
can no longer serve at the mix's ratio (``stranding.py``). So a node whose CPU keeps up
with its free GPUs costs nothing, a node whose idle GPUs need the CPU the pod would take
loses, and a node without GPUs, or one the extender has no report of, is neutral (0). The
reply's integers come in two tiers (``host_priorities``), with no cost term (prices are
per GPU memory).
"""

from __future__ import annotations

import numpy as np

from extender.scoring.batch import Floats, GpuBatch, Ints
from extender.scoring.fragmentation import Mix, host_delta
from extender.scoring.model import MAX_PRIORITY, GpuDemand, Limits
from extender.scoring.stranding import stranding_delta

COSTLY_TOP = 5  # the best score a node where the pod costs something can get


def host_scores(
    b: GpuBatch, rows: Ints, demand: GpuDemand, lim: Limits, mix: Mix, stranding: float
) -> Floats:
    """``raw`` per row of ``rows`` (-1: a node without a usable report, scored 0)."""
    raw = np.zeros(len(rows))
    known = rows >= 0
    if not known.any():
        return raw
    r = rows[known]
    raw[known] = -(host_delta(b, r, demand, lim, mix) / 1024)
    if stranding != 0.0:
        strand = stranding_delta(b, r, tuple(mix), demand, np.zeros(len(r)))
        raw[known] -= stranding * strand
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
