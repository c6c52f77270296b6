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
without GPUs, or one the extender has no report of, is neutral (0). The raw scores are
min-max normalised to the protocol's 0..10 with no cost term (prices are per GPU memory).
"""

from __future__ import annotations

import numpy as np

from extender.scoring.batch import Floats, GpuBatch, Ints, imbalance_at, node_gpu_fill
from extender.scoring.fragmentation import Mix, host_delta
from extender.scoring.framework import Weights, priority_array
from extender.scoring.model import GpuDemand, Limits

NOTHING = GpuDemand(0)
HOST_WEIGHTS = Weights(policy=1.0, cost=0.0)


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
    """The prioritize reply's integers for ``host_scores``: every candidate fits (the
    in-tree filter has judged its CPU and memory)."""
    return priority_array(
        raw, np.ones(len(raw), dtype=bool), np.full(len(raw), np.nan), HOST_WEIGHTS
    )
