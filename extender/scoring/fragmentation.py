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

from extender.demand import CapacityPref, GpuDemand
from extender.scoring.batch import (
    WHOLE,
    Bools,
    Floats,
    GpuBatch,
    Ints,
    ask_of,
    chosen_fill_at,
    node_fill_at,
)
from extender.scoring.compiled import kernel, warms
from extender.scoring.model import Limits
from extender.scoring.policy import Shape

Mix = Sequence[tuple[Shape, float]]


ANY, ON_DEMAND_ONLY, SPOT_ONLY = 0, 1, 2  # the capacity-type rule, as kernels take it
_RULES = {CapacityPref.ANY: ANY, CapacityPref.ON_DEMAND: ON_DEMAND_ONLY,
          CapacityPref.SPOT: SPOT_ONLY}


def greedy_scores(b: GpuBatch, rows: Ints | None, demand: GpuDemand, lim: Limits, mix: Mix,
                  tie_by_free: bool, tie: float) -> tuple[Bools, Floats]:
    """FGD's greedy placement for these rows of ``b`` (all when None; -1: a node that is
    unavailable, which never fits), read in place: whether each row fits (capacity-type
    rule, ``demand.count`` slots that ``can_hold`` a unit) and, where it does, the score
        -(F after placing every unit - F before) / GiB + tie x fill
    fill = 0.5 x the chosen GPUs' fill after + 0.5 x the node's (``batch.chosen_fill_after``,
    ``batch.node_fill_after``; computed only when tie != 0); 0 where it does not fit.
    Ties on F go to the slot with least headroom when ``tie_by_free`` (the ``headroom``
    policy), then to the lowest index (both FGD policies).

    In place and whole because the filter evaluates rows of the inventory's columns:
    taking them first cost as much as the placement for 5,000 rows, and the dozen NumPy
    calls around it dominated for the 50 rows a round of reports changes."""
    counts, mems, shares = _plain(tuple(mix))
    at = np.arange(len(b), dtype=np.int64) if rows is None else rows
    grids = (b.total, b.committed, b.reserved, b.present)
    # one compiled specialisation: C-contiguous int64/bool grids (no copy when they are)
    return _greedy(*map(np.ascontiguousarray, grids), b.node_total, b.node_committed, b.spot,
                   np.ascontiguousarray(at, dtype=np.int64), int(lim.margin_mib),
                   int(lim.idle_mib), ask_of(demand), _RULES[demand.capacity], counts, mems,
                   shares, int(demand.count), bool(tie_by_free), float(tie))


@warms
def _warm_up() -> None:
    z, yes = np.zeros((1, 1), dtype=np.int64), np.ones((1, 1), dtype=bool)
    one = np.ones(1, dtype=np.int64)
    _greedy(z, z, z, yes, one, one, np.zeros(1, dtype=bool), np.zeros(1, dtype=np.int64),
            0, 0, 1, ANY, one, one, np.ones(1), 1, True, 0.5)


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
def _greedy(total_mib, committed, reserved, present, node_total, node_committed, spot, rows,
            margin, idle_mib, ask, rule, counts, mems, shares, count, tie_by_free,
            tie):  # numba infers the types
    n_slots, n_nodes = total_mib.shape[0], rows.shape[0]
    fits = np.zeros(n_nodes, dtype=np.bool_)
    slots = np.zeros((count, n_nodes), dtype=np.int64)
    raw = np.zeros(n_nodes)
    free, headroom = np.empty(n_slots, dtype=np.int64), np.empty(n_slots, dtype=np.int64)
    unit = np.empty(n_slots, dtype=np.int64)
    idle, cand = np.empty(n_slots, dtype=np.bool_), np.empty(n_slots, dtype=np.bool_)
    hosting = np.empty(counts.shape[0], dtype=np.int64)
    hosted = np.empty(counts.shape[0], dtype=np.int64)
    for n in range(n_nodes):
        r = rows[n]
        if r < 0 or (rule == ON_DEMAND_ONLY and spot[r]) or (rule == SPOT_ONLY and not spot[r]):
            continue
        total, holding = 0, 0
        for g in range(n_slots):  # GpuBatch.free / .idle / .unit / .can_hold, slot by slot
            headroom[g] = total_mib[g, r] - committed[g, r] - margin
            free[g] = max(headroom[g], 0) if present[g, r] else 0
            idle[g] = present[g, r] and reserved[g, r] == 0 and committed[g, r] <= idle_mib
            unit[g] = total_mib[g, r] if ask == WHOLE else ask
            cand[g] = idle[g] if ask == WHOLE else present[g, r] and headroom[g] >= ask
            total += free[g]
            holding += cand[g]
        if holding < count:
            continue
        fits[n] = True
        before, after = 0.0, 0.0
        for k in range(count):
            _terms(free, idle, present, r, mems, hosting, hosted)
            if k == 0:
                before = _value(total, hosting, hosted, counts, shares)
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
                f = _trial(j, free, idle, present[j, r], unit[j], total, hosting, hosted,
                           counts, mems, shares)
                if f < best or (f == best and tie_by_free and headroom[j] < headroom[pick]):
                    best, pick = f, j
            slots[k, n], after = pick, best
            left = max(free[pick] - unit[pick], 0)
            total += left - free[pick]
            free[pick], idle[pick], cand[pick] = left, False, False
        fill = 0.0
        if tie != 0.0:
            fill = (0.5 * chosen_fill_at(total_mib, committed, ask, slots, n, r)
                    + 0.5 * node_fill_at(total_mib, node_total, node_committed, ask, slots, n, r))
        raw[n] = -((after - before) / 1024) + tie * fill
    return fits, raw


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
