"""FGD's fragmentation measure F: the one definition, and FGD's greedy placement by it.

For the expected workload M (``Context.mix``: shapes m = (count, memory or None for a
whole GPU, MIG profile, CPU, host memory, allowed models) with shares p_m), over a
node's plain GPUs, each (free >= 0, idle):
    F(n)   = sum_m p_m * F_m(n)   (added in mix order)
    F_m(n) = 0 if the node's GPU model is not one m allows (outside m's measure: ``_room``
             says why not FGD's "all fragmented"); all free memory if the node cannot
             run m: its free CPU or host memory is less than m asks (FGD's definition);
             else free memory on GPUs that cannot host one unit of m, if at least
             ``count_m`` can; else all free memory. A GPU hosts m if free >= mem_m, or, for a whole
             GPU (mem None), if it is idle. MIG shapes: 0 (fixed partitions).
    place  = per unit, the holding GPU whose trial placement gives the least F; F after
             counts the node's CPU and memory as the pod leaves them
Sums are whole MiB (held in float64, exact) and the shares are applied in mix order, so
F is the same number however the node is walked. ``tests/fragmentation_reference.py``
writes the same definitions in plain Python, one node at a time: the oracle this module
is tested against. The policies ``fgd`` and ``headroom`` call this module for a batch
(``greedy_scores``) and for one node (``greedy_place``, ``fragmentation_delta``);
``fragmentation_of`` reports F (the quality bench, the simulator).

The pass over the nodes runs in ``kernel.c``, compiled when the package is built: per
node, the state of its slots (free = max(headroom, 0), idle, what one unit takes, which
slots can hold one), the per-shape terms, the trials and the picks, then S and the tie
term, about a third of the time the same pass took as NumPy calls (figures:
docs/BENCHMARKS.md). This module turns the batch, the mix and the demand into the
kernel's arguments.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from extender.scoring import kernel  # compiled from kernel.c when the package is built
from extender.scoring.batch import (
    WHOLE,
    Bools,
    Floats,
    GpuBatch,
    Ints,
    ask_of,
    contiguous,
)
from extender.scoring.model import (
    CapacityPref,
    GpuDemand,
    GpuView,
    Limits,
    NodeView,
    Shape,
    ShapeLike,
)
from extender.scoring.stranding import per_pod_args

Mix = Sequence[tuple[ShapeLike, float]]


ANY, ON_DEMAND_ONLY, SPOT_ONLY = 0, 1, 2  # the capacity-type rule, as a plain integer
_RULES = {
    CapacityPref.ANY: ANY,
    CapacityPref.ON_DEMAND: ON_DEMAND_ONLY,
    CapacityPref.SPOT: SPOT_ONLY,
}


def greedy_scores(
    b: GpuBatch,
    rows: Ints | None,
    demand: GpuDemand,
    lim: Limits,
    mix: Mix,
    tie_by_free: bool,
    tie: float,
    stranding: float = 0.0,
) -> tuple[Bools, Floats]:
    """FGD's greedy placement for these rows of ``b`` (all when None; -1: a node that is
    unavailable, which never fits), read in place: whether each row fits (capacity-type
    rule, host room, ``demand.count`` slots that ``can_hold`` a unit) and, where it
    does, the score
        -(F after placing every unit - F before) / GiB - stranding x dS + tie x fill
    dS: ``stranding.stranding_delta``; fill: 0.5 x the chosen GPUs' fill after + 0.5 x
    the node's (GPU memory, ``policy.chosen_fill_after`` and ``node_fill_after``); 0
    where it does not fit. Each unit goes to the slot whose trial placement gives the
    least F; ties go to the slot with least headroom when ``tie_by_free`` (the
    ``headroom`` policy), then to the lowest index (both FGD policies)."""
    at = np.arange(len(b), dtype=np.int64) if rows is None else _int64(rows)
    fits, raw, _ = _scores(b, at, demand, lim, mix, tie_by_free, tie, stranding, None)
    return fits, raw


def share_passes(on: bool) -> None:
    """Whether ``greedy_scores`` may share a pass that places the pod on 2,048 rows or
    more (rows in a state already placed are copies) with the kernel's helper thread
    (``helper.h``): the same answers, about 1.7x sooner on two idle CPUs
    (docs/BENCHMARKS.md, "A second CPU for a new shape's pass")."""
    kernel.share(on)


def fragmentation_of(b: GpuBatch, lim: Limits, mix: Mix) -> Floats:
    """F per node of ``b`` (MiB, as float64)."""
    return _value(b, np.arange(len(b), dtype=np.int64), lim, mix, None)


def host_delta(b: GpuBatch, rows: Ints, demand: GpuDemand, lim: Limits, mix: Mix) -> Floats:
    """F after - F before per row of ``rows`` for a pod that takes only CPU and memory (no
    GPU): the free GPU memory it makes unusable for the mix by leaving too little host
    room for a shape (FGD scores such pods by the same F as any other)."""
    at = _int64(rows)
    return _value(b, at, lim, mix, demand) - _value(b, at, lim, mix, None)


def greedy_place(
    node: NodeView,
    demand: GpuDemand,
    fitting: Sequence[GpuView],
    lim: Limits,
    mix: Mix,
    tie_by_free: bool,
) -> tuple[GpuView, ...]:
    """``greedy_scores``' placement on one node, for a plain demand: ``demand.count`` of
    the ``fitting`` GPUs (at least that many), one unit after another, each on the GPU
    whose trial placement gives the least F (ties as ``greedy_scores``)."""
    b, gpus = _one(node, lim)
    chosen = {g.uuid for g in fitting}
    cand = np.array([[g.uuid in chosen] for g in gpus], dtype=np.bool_).reshape(len(gpus), 1)
    one = np.zeros(1, np.int64)
    picks = _scores(b, one, demand, lim, mix, tie_by_free, 0.0, 0.0, cand)[2][:, 0].tolist()
    if min(picks, default=0) < 0:
        raise ValueError(f"{len(chosen)} fitting GPUs for a demand of {demand.count}")
    return tuple(gpus[k] for k in picks)


def fragmentation_delta(
    node: NodeView, demand: GpuDemand, chosen: Sequence[GpuView], lim: Limits, mix: Mix
) -> float:
    """F after one unit of a plain demand sits on each ``chosen`` GPU - F before (MiB):
    F of the node as it is against F of a copy where each chosen GPU has committed one
    unit more (its free MiB less by the unit, floored at 0) and holds a grant (busy)."""
    b, gpus = _one(node, lim)
    slot = {g.uuid: k for k, g in enumerate(gpus)}
    committed, reserved = b.committed.copy(), b.reserved.copy()
    for g in chosen:
        k = slot[g.uuid]
        committed[k, 0] += g.total_mib if demand.memory_mib is None else demand.memory_mib
        reserved[k, 0] += 1
    taken = dataclasses.replace(b, committed=committed, reserved=reserved, state=None)
    one = np.zeros(1, np.int64)
    after = _value(taken, one, lim, mix, demand)
    return float(after[0] - _value(b, one, lim, mix, None)[0])


def _one(node: NodeView, lim: Limits) -> tuple[GpuBatch, list[GpuView]]:
    """One node's batch and plain GPUs in slot (index) order."""
    plain = sorted((g for g in node.gpus if not g.mig_profile), key=lambda g: g.index)
    return GpuBatch.from_views([node], lim), plain


def _scores(
    b: GpuBatch,
    at: Ints,
    demand: GpuDemand,
    lim: Limits,
    mix: Mix,
    by_free: bool,
    tie: float,
    stranding: float,
    cand: Bools | None,
) -> tuple[Bools, Floats, Ints]:
    """``kernel.scores``: fits, raw scores and the slots picked per unit, [unit, row]."""
    key = tuple(mix)
    fits, raw = np.empty(len(at), np.bool_), np.empty(len(at))
    picks = np.empty((int(demand.count), len(at)), np.int64)
    kernel.scores(
        *b.size(),
        b.kernel_args(),
        at,
        b.state,
        (
            int(demand.count),
            ask_of(demand),
            _RULES[demand.capacity],
            int(demand.cpu_milli),
            int(demand.host_memory_mib),
        ),
        (int(lim.margin_mib), int(lim.idle_mib)),
        _mix_args(b, at, _plain(key)),
        per_pod_args(key),
        (by_free, float(tie), float(stranding), cand),
        (fits, raw, picks),
    )
    return fits, raw, picks


def _value(b: GpuBatch, at: Ints, lim: Limits, mix: Mix, pod: GpuDemand | None) -> Floats:
    """``kernel.value``: F of each row, its host room as ``pod`` (when given) leaves it."""
    out = np.empty(len(at))
    host = (0, 0) if pod is None else (int(pod.cpu_milli), int(pod.host_memory_mib))
    margins = (int(lim.margin_mib), int(lim.idle_mib))
    plain = _plain(tuple(mix))
    kernel.value(*b.size(), b.kernel_args(), at, host, margins, _mix_args(b, at, plain), out)
    return out


def _int64(rows: Ints) -> Ints:
    return contiguous(rows.astype(np.int64, copy=False))


class _Plain(NamedTuple):
    """The mix's non-MIG shapes as arrays, in mix order (the order shares are summed in)."""

    counts: Ints
    mems: Floats  # MiB per GPU; WHOLE for whole GPUs
    shares: Floats
    cpus: Ints  # milli
    host_mibs: Ints
    models: tuple[tuple[str, ...], ...]  # allowed GPU models per shape; () any


@functools.lru_cache(maxsize=16)  # the mix changes rarely; these arrays are never written
def _plain(mix: Mix) -> _Plain:
    shapes = [(Shape(*shape), p) for shape, p in mix]
    plain = [(s, p) for s, p in shapes if not s.mig_profile]
    return _Plain(
        np.array([s.gpus for s, _ in plain], dtype=np.int64),
        np.array([WHOLE if s.memory_mib is None else s.memory_mib for s, _ in plain], np.float64),
        np.array([p for _, p in plain], dtype=np.float64),
        np.array([s.cpu_milli for s, _ in plain], dtype=np.int64),
        np.array([s.host_memory_mib for s, _ in plain], dtype=np.int64),
        tuple(tuple(sorted(s.models)) for s, _ in plain),
    )


def _mix_args(b: GpuBatch, at: Ints, plain: _Plain) -> tuple:
    """The kernel's ``Mix`` (``args.h``): the plain shapes and their weights on each row."""
    weights = _weights(b, at, plain)
    p = plain
    return (len(p.counts), weights.shape[1], p.counts, p.mems, p.cpus, p.host_mibs, weights)


def _weights(b: GpuBatch, r: Ints, plain: _Plain) -> Floats:
    """[shape, node] weights: each shape's share where the node's GPU model is one the
    shape may use, else 0; [shape, 1] (one column for every node) when no shape of the mix
    names models, as with the learned mix.

    Why a disallowed model weighs 0 rather than counting all free memory as fragmented
    (FGD's wording): FGD measures in GPU shares, where every GPU is 1,000 milli; here F is
    in MiB, so "all free memory" of a node the shape cannot use shrinks by whatever a pod
    takes there, and the measure rewarded putting whole-GPU pods on the largest GPUs that
    constrained shapes may not use. On the synthetic cluster (six models, 16-80 GiB) that
    cost 4.4 points of allocation at 100 % arrived; on openb (every GPU 16,000 MiB) it
    changed nothing (docs/scheduling.md)."""
    if not any(plain.models):
        return contiguous(plain.shares[:, None])
    weights = np.repeat(plain.shares[:, None], len(r), axis=1)
    model = b.model[np.maximum(r, 0)]  # -1, a node that never fits: any row's model will do
    for k, models in enumerate(plain.models):
        if models:
            weights[k] *= np.isin(model, models)
    return weights
