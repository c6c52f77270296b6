"""FGD's fragmentation measure over a ``GpuBatch``: every node and every trial at once.

The same definitions as ``policies/fgd.py`` (whose per-node code is the reference):
    F(n)   = sum_m p_m * F_m(n),  F_m(n) = free memory on GPUs that cannot host one unit
             of m if at least ``count_m`` can, else all free memory (MIG shapes: 0)
    place  = per unit, the holding GPU whose trial placement gives the least F
State is (free >= 0, idle) per slot, absent slots (0, False). Sums are integer MiB and
the shares are applied in mix order, so each F equals the per-node value exactly.

Why compiled: this is the one computation that grows with nodes x GPUs x mix shapes
(5,000 nodes x 8 GPUs x 8 shapes is 320,000 trials for a pod of a new shape). As NumPy
it took ~15 passes over [shapes, GPUs, nodes] temporaries (~1.5 ms at 5,000 nodes) and
~150 array calls whatever the size (~0.5 ms for the 50 nodes a report round changes);
numba runs it as one loop per node, a few microseconds per node, no temporaries, and
keeps IEEE arithmetic in the same order (no fast-math), so results stay bit-exact.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from extender.demand import GpuDemand
from extender.scoring.batch import WHOLE, Bools, Floats, GpuBatch, Ints, ask_of
from extender.scoring.compiled import kernel, warms
from extender.scoring.model import Limits
from extender.scoring.policy import Shape

Mix = Sequence[tuple[Shape, float]]


def greedy_place(
    b: GpuBatch, demand: GpuDemand, hold: Bools, lim: Limits, mix: Mix, tie_by_free: bool
) -> tuple[Ints, Floats, Floats]:
    """Per node: the chosen slots ([count, N]), F before and F after placing every unit.

    Ties on F go to the slot with least headroom when ``tie_by_free`` (the ``headroom``
    policy), then to the lowest index (both policies). Every row must be able to hold
    ``demand.count`` units (the framework scores fitting nodes only)."""
    counts, mems, shares = _plain(tuple(mix))
    grids = (b.total, b.committed, b.reserved, b.present, hold)
    # one compiled specialisation: C-contiguous int64/bool grids (no copy when they are)
    return _greedy(*map(np.ascontiguousarray, grids), int(lim.margin_mib), int(lim.idle_mib),
                   ask_of(demand), counts, mems, shares, int(demand.count), bool(tie_by_free))


@warms
def _warm_up() -> None:
    z, yes = np.zeros((1, 1), dtype=np.int64), np.ones((1, 1), dtype=bool)
    one = np.ones(1, dtype=np.int64)
    _greedy(z, z, z, yes, yes, 0, 0, 1, one, one, np.ones(1), 1, True)


@functools.lru_cache(maxsize=16)  # the mix changes rarely; these arrays are never written
def _plain(mix: Mix) -> tuple[Ints, Ints, Floats]:
    """(counts, memories (WHOLE for whole GPUs), shares) of the mix's non-MIG shapes, in
    mix order (the order the shares are summed in)."""
    plain = [(count, WHOLE if mem is None else mem, p) for (count, mem, prof), p in mix
             if not prof]
    return (
        np.array([c for c, _, _ in plain], dtype=np.int64),
        np.array([m for _, m, _ in plain], dtype=np.int64),
        np.array([p for _, _, p in plain], dtype=np.float64),
    )


@kernel
def _greedy(total_mib, committed, reserved, present, hold, margin, idle_mib, ask, counts, mems,
            shares, count, tie_by_free):  # numba infers the types
    n_slots, n_nodes = total_mib.shape
    slots = np.zeros((count, n_nodes), dtype=np.int64)
    before, after = np.zeros(n_nodes), np.zeros(n_nodes)
    free, headroom = np.empty(n_slots, dtype=np.int64), np.empty(n_slots, dtype=np.int64)
    unit = np.empty(n_slots, dtype=np.int64)
    idle, cand = np.empty(n_slots, dtype=np.bool_), np.empty(n_slots, dtype=np.bool_)
    hosting = np.empty(counts.shape[0], dtype=np.int64)
    hosted = np.empty(counts.shape[0], dtype=np.int64)
    for n in range(n_nodes):
        total = 0
        for g in range(n_slots):  # GpuBatch.free / .idle / .unit, slot by slot
            headroom[g] = total_mib[g, n] - committed[g, n] - margin
            free[g] = max(headroom[g], 0) if present[g, n] else 0
            idle[g] = present[g, n] and reserved[g, n] == 0 and committed[g, n] <= idle_mib
            unit[g] = total_mib[g, n] if ask == WHOLE else ask
            cand[g] = hold[g, n]
            total += free[g]
        for k in range(count):
            _terms(free, idle, present, n, mems, hosting, hosted)
            if k == 0:
                before[n] = _value(total, hosting, hosted, counts, shares)
            best, pick = np.inf, -1
            for j in range(n_slots):
                if not cand[j]:
                    continue
                # an earlier candidate in the same state gives the same F and wins the
                # tie (same headroom, lower index): an empty node needs one trial, not 8
                alike = False
                for i in range(j):
                    if (cand[i] and free[i] == free[j] and idle[i] == idle[j]
                            and unit[i] == unit[j] and headroom[i] == headroom[j]):
                        alike = True
                        break
                if alike:
                    continue
                f = _trial(j, free, idle, present[j, n], unit[j], total, hosting, hosted,
                           counts, mems, shares)
                if f < best or (f == best and tie_by_free and headroom[j] < headroom[pick]):
                    best, pick = f, j
            if pick < 0:  # cannot happen for a fitting row; keep the NumPy meaning (inf)
                after[n] = np.inf
                break
            slots[k, n], after[n] = pick, best
            left = max(free[pick] - unit[pick], 0)
            total += left - free[pick]
            free[pick], idle[pick], cand[pick] = left, False, False
    return slots, before, after


@kernel
def _terms(free, idle, present, n, mems, hosting, hosted):
    """Per shape: GPUs that can host one unit of it, and their free MiB."""
    for s in range(mems.shape[0]):
        h, f = 0, 0
        for g in range(free.shape[0]):
            if idle[g] if mems[s] == WHOLE else (present[g, n] and free[g] >= mems[s]):
                h += 1
                f += free[g]
        hosting[s], hosted[s] = h, f


@kernel
def _value(total, hosting, hosted, counts, shares):
    acc = 0.0
    for s in range(counts.shape[0]):
        acc = acc + shares[s] * (total - hosted[s] if hosting[s] >= counts[s] else total)
    return acc


@kernel
def _trial(j, free, idle, present, unit, total, hosting, hosted, counts, mems,
           shares):
    """F if slot j alone took one unit (and so became busy)."""
    left = max(free[j] - unit, 0)
    after_total = total - free[j] + left
    acc = 0.0
    for s in range(counts.shape[0]):
        if mems[s] == WHOLE:  # a busy GPU never hosts a whole-GPU shape
            host = idle[j]
            n = hosting[s] - host
            unusable = after_total - (hosted[s] - free[j] * host)
        else:
            host = present and free[j] >= mems[s]
            gained = left >= mems[s]
            n = hosting[s] - host + gained
            unusable = after_total - (hosted[s] - free[j] * host + left * gained)
        acc = acc + shares[s] * (unusable if n >= counts[s] else after_total)
    return acc
