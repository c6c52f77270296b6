"""FGD's fragmentation measure over a ``GpuBatch``: every node and every trial at once.

The same definitions as ``policies/fgd.py`` (whose per-node code is the reference):
    F(n)   = sum_m p_m * F_m(n),  F_m(n) = free memory on GPUs that cannot host one unit
             of m if at least ``count_m`` can, else all free memory (MIG shapes: 0)
    place  = per unit, the holding GPU whose trial placement gives the least F
State is (free >= 0, idle) per slot, absent slots (0, False). Sums are integer MiB and
the shares are applied in mix order, so each F equals the per-node value exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from extender.demand import GpuDemand
from extender.scoring.batch import FAR, Bools, Floats, GpuBatch, Ints
from extender.scoring.model import Limits
from extender.scoring.policy import Shape

Mix = Sequence[tuple[Shape, float]]


def initial_state(b: GpuBatch, lim: Limits) -> tuple[Ints, Bools]:
    """``fgd.node_state`` for every row: clamped headroom and idleness per slot."""
    return np.where(b.present, np.maximum(b.free(lim), 0), 0), b.idle(lim)


def greedy_place(
    b: GpuBatch, demand: GpuDemand, hold: Bools, lim: Limits, mix: Mix, tie_by_free: bool
) -> tuple[Ints, Floats, Floats]:
    """Per node: the chosen slots ([count, N]), F before and F after placing every unit.

    Ties on F go to the slot with least headroom when ``tie_by_free`` (the ``headroom``
    policy), then to the lowest index (both policies). F after a unit is the winning
    trial's F, so it is never recomputed."""
    shapes = _plain(mix)
    free, idle = initial_state(b, lim)
    unit, headroom = b.unit(demand), b.free(lim)
    candidates = hold.copy()
    nodes = np.arange(len(b))
    slots = np.empty((demand.count, len(b)), dtype=np.int64)
    before = after = np.zeros(len(b))
    for k in range(demand.count):
        terms = _terms(free, idle, b.present, shapes)
        if k == 0:
            before = _value(free.sum(axis=0), terms, shapes)
        new_free = np.maximum(free - unit, 0)
        trial = np.where(candidates, _trial(free, new_free, terms, shapes), np.inf)
        after = trial.min(axis=0)
        tied = trial == after
        j = np.argmin(np.where(tied, headroom, FAR), axis=0) if tie_by_free else tied.argmax(0)
        slots[k] = j
        free[j, nodes] = new_free[j, nodes]
        idle[j, nodes] = False
        candidates[j, nodes] = False
    return slots, before, after


# (count, mem or None for whole GPUs, share) of the mix's non-MIG shapes, in mix order
_Shapes = list[tuple[int, int | None, float]]
# per distinct mem: (hosts [N, G], GPUs hosting [N], their free MiB [N])
_Terms = dict[int | None, tuple[Bools, Ints, Ints]]


def _plain(mix: Mix) -> _Shapes:
    return [(count, mem, p) for (count, mem, profile), p in mix if not profile]


def _terms(free: Ints, idle: Bools, present: Bools, shapes: _Shapes) -> _Terms:
    terms: _Terms = {}
    for _, mem, _ in shapes:
        if mem not in terms:
            host = idle if mem is None else present & (free >= mem)
            terms[mem] = (host, host.sum(axis=0), (free * host).sum(axis=0))
    return terms


def _value(total: Ints, terms: _Terms, shapes: _Shapes) -> Floats:
    acc = np.zeros(total.shape)
    for count, mem, p in shapes:
        _, hosting, hosted = terms[mem]
        acc = acc + p * np.where(hosting >= count, total - hosted, total)
    return acc


def _trial(free: Ints, new_free: Ints, terms: _Terms, shapes: _Shapes) -> Floats:
    """F per slot and node, if that slot alone went to ``new_free`` and busy."""
    total = free.sum(axis=0) - free + new_free
    per_mem: dict[int | None, tuple[Ints, Ints]] = {}
    for mem, (host, hosting, hosted) in terms.items():
        kept = free * host
        if mem is None:  # a busy GPU never hosts a whole-GPU shape
            per_mem[mem] = (hosting - host, total - (hosted - kept))
        else:
            gained = new_free >= mem
            n = hosting - host + gained
            per_mem[mem] = (n, total - (hosted - kept + new_free * gained))
    acc = np.zeros(free.shape)
    for count, mem, p in shapes:
        n, unusable = per_mem[mem]
        acc = acc + p * np.where(n >= count, unusable, total)
    return acc
