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
from typing import NamedTuple

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
) -> tuple[Bools, Floats]:
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
    args = (
        *map(np.ascontiguousarray, grids),
        b.node_total,
        b.node_committed,
        b.spot,
        np.ascontiguousarray(at, dtype=np.int64),
        int(lim.margin_mib),
        int(lim.idle_mib),
        ask_of(demand),
        _RULES[demand.capacity],
        counts,
        mems,
        shares,
    )
    if demand.count == 1:
        return _greedy_one(*args, bool(tie_by_free), float(tie))
    return _greedy(*args, int(demand.count), bool(tie_by_free), float(tie))


@warms
def _warm_up() -> None:
    z, yes = np.zeros((1, 1), dtype=np.int64), np.ones((1, 1), dtype=bool)
    one = np.ones(1, dtype=np.int64)
    args = (
        z,
        z,
        z,
        yes,
        one,
        one,
        np.zeros(1, dtype=bool),
        np.zeros(1, dtype=np.int64),
        0,
        0,
        1,
        ANY,
        one,
        one,
        np.ones(1),
    )
    _greedy(*args, 1, True, 0.5)
    _greedy_one(*args, True, 0.5)


@functools.lru_cache(maxsize=16)  # the mix changes rarely; these arrays are never written
def _plain(mix: Mix) -> tuple[Ints, Ints, Floats]:
    """(counts, memories (WHOLE for whole GPUs), shares) of the mix's non-MIG shapes, in
    mix order (the order the shares are summed in)."""
    plain = [(count, WHOLE if mem is None else mem, p) for (count, mem, prof), p in mix if not prof]
    return (
        np.array([c for c, _, _ in plain], dtype=np.int64),
        np.array([m for _, m, _ in plain], dtype=np.int64),
        np.array([p for _, _, p in plain], dtype=np.float64),
    )


@kernel
def _greedy(
    total_mib,
    committed,
    reserved,
    present,
    node_total,
    node_committed,
    spot,
    rows,
    margin,
    idle_mib,
    ask,
    rule,
    counts,
    mems,
    shares,
    count,
    tie_by_free,
    tie,
):  # numba infers the types
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
                    if (
                        cand[i]
                        and free[i] == free[j]
                        and idle[i] == idle[j]
                        and unit[i] == unit[j]
                        and headroom[i] == headroom[j]
                    ):
                        alike = True
                        break
                if alike:
                    continue
                f = _trial(
                    j,
                    free,
                    idle,
                    present[j, r],
                    unit[j],
                    total,
                    hosting,
                    hosted,
                    counts,
                    mems,
                    shares,
                )
                if f < best or (f == best and tie_by_free and headroom[j] < headroom[pick]):
                    best, pick = f, j
            slots[k, n], after = pick, best
            left = max(free[pick] - unit[pick], 0)
            total += left - free[pick]
            free[pick], idle[pick], cand[pick] = left, False, False
        fill = 0.0
        if tie != 0.0:
            fill = 0.5 * chosen_fill_at(
                total_mib, committed, ask, slots, n, r
            ) + 0.5 * node_fill_at(total_mib, node_total, node_committed, ask, slots, n, r)
        raw[n] = -((after - before) / 1024) + tie * fill
    return fits, raw


BLOCK = 256  # nodes per block in _greedy_one: its arrays stay in L1


@kernel
def _greedy_one(
    total_mib,
    committed,
    reserved,
    present,
    node_total,
    node_committed,
    spot,
    rows,
    margin,
    idle_mib,
    ask,
    rule,
    counts,
    mems,
    shares,
    tie_by_free,
    tie,
):  # numba infers the types
    """``_greedy`` for one unit (most pods), the same arithmetic in the same order, laid
    out for the CPU: a block of nodes at a time, every loop over the nodes of the block
    (no per-node branches on the shape or the ask, so LLVM vectorises them), and every
    candidate slot of a node tried (``_greedy`` skips a slot in the same state as an
    earlier one; such a slot never wins: same F, same headroom, higher index). 2.5-3x
    faster for fractional asks at 5,000 nodes; equal bit for bit (tests compare both with
    the per-node policies)."""
    n_nodes = rows.shape[0]
    fits, raw = np.zeros(n_nodes, dtype=np.bool_), np.zeros(n_nodes)
    shape = (total_mib.shape[0], BLOCK)
    st = _Block(
        np.empty(shape, np.int64),
        np.empty(shape, np.int64),
        np.empty(shape, np.int64),
        np.empty(shape, np.bool_),
        np.empty(shape, np.bool_),
        np.empty(shape, np.bool_),
        np.empty(BLOCK, np.int64),
        np.empty(BLOCK, np.int64),
    )
    buf = _Slot(
        np.empty(BLOCK, np.int64),
        np.empty(BLOCK, np.int64),
        np.empty(BLOCK, np.int64),
        np.empty(BLOCK, np.bool_),
    )
    hosting = np.empty((counts.shape[0], BLOCK), np.int64)
    hosted = np.empty((counts.shape[0], BLOCK), np.int64)
    before, best = np.empty(BLOCK), np.empty(BLOCK)
    pick, f = np.empty(BLOCK, np.int64), np.empty(BLOCK)
    for n0 in range(0, n_nodes, BLOCK):
        m = min(BLOCK, n_nodes - n0)
        _block_state(
            st,
            total_mib,
            committed,
            reserved,
            present,
            rows[n0 : n0 + m],
            margin,
            idle_mib,
            ask,
            buf,
        )
        _block_terms(st, m, mems, hosting, hosted)
        _block_value(st, m, counts, shares, hosting, hosted, before)
        _block_pick(st, m, counts, mems, shares, hosting, hosted, tie_by_free, f, best, pick)
        for k in range(m):
            n, r = n0 + k, rows[n0 + k]
            if (
                r < 0
                or (rule == ON_DEMAND_ONLY and spot[r])
                or (rule == SPOT_ONLY and not spot[r])
                or st.holding[k] < 1
            ):
                continue
            fits[n] = True
            fill = 0.0
            if tie != 0.0:
                g = pick[k]
                fill = 0.5 * _one_fill(
                    total_mib[g, r], committed[g, r], st.unit[g, k]
                ) + 0.5 * _one_node_fill(st, k, g, node_total[r], node_committed[r])
            raw[n] = -((best[k] - before[k]) / 1024) + tie * fill
    return fits, raw


class _Block(NamedTuple):
    """A block of nodes' slots, [slot, node of the block] (see ``_greedy_one``)."""

    headroom: Ints
    free: Ints
    unit: Ints
    present: Bools
    idle: Bools
    cand: Bools
    sum_free: Ints  # [node]
    holding: Ints  # [node] slots that can hold a unit


class _Slot(NamedTuple):
    """One slot's column values for a block's nodes, gathered (``_block_state``)."""

    total: Ints
    committed: Ints
    reserved: Ints
    present: Bools


@kernel
def _block_state(st, total_mib, committed, reserved, present, rows, margin, idle_mib, ask, buf):
    """``_greedy``'s per-slot state for the block's rows (-1 rows read row 0; their
    results are never used). Rows that run consecutively (a candidate list in row
    order, the common case) are read as slices of the columns, which vectorises; any
    other block gathers each slot's values into ``buf`` first: 5-6x slower at 5,000."""
    m = rows.shape[0]
    r0 = rows[0]
    consecutive = r0 >= 0
    for k in range(m):
        consecutive &= rows[k] == r0 + k
    for k in range(m):
        st.sum_free[k], st.holding[k] = 0, 0
    for g in range(total_mib.shape[0]):
        if consecutive:
            t, c = total_mib[g, r0 : r0 + m], committed[g, r0 : r0 + m]
            rs, p = reserved[g, r0 : r0 + m], present[g, r0 : r0 + m]
        else:
            t, c, rs, p = buf.total[:m], buf.committed[:m], buf.reserved[:m], buf.present[:m]
            for k in range(m):
                r = max(rows[k], 0)
                t[k], c[k] = total_mib[g, r], committed[g, r]
                rs[k], p[k] = reserved[g, r], present[g, r]
        _slot_state(st, g, t, c, rs, p, m, margin, idle_mib, ask)


@kernel
def _slot_state(st, g, t, c, rs, p, m, margin, idle_mib, ask):
    """Slot g of the block's nodes from its columns' values (1-D, block order)."""
    whole = ask == WHOLE
    for k in range(m):
        tk, ck, pk = t[k], c[k], p[k]
        h = tk - ck - margin
        fr = max(h, 0) * pk
        idle = pk & (rs[k] == 0) & (ck <= idle_mib)
        cand = idle if whole else pk & (h >= ask)
        st.headroom[g, k], st.free[g, k], st.present[g, k] = h, fr, pk
        st.idle[g, k], st.unit[g, k], st.cand[g, k] = idle, tk if whole else ask, cand
    for k in range(m):  # a loop of its own: with them above, too many arrays to vectorise
        st.sum_free[k] += st.free[g, k]
        st.holding[k] += st.cand[g, k]


@kernel
def _block_terms(st, m, mems, hosting, hosted):
    """``_terms`` for every node of the block."""
    for s in range(mems.shape[0]):
        for k in range(m):
            hosting[s, k], hosted[s, k] = 0, 0
        for g in range(st.free.shape[0]):
            if mems[s] == WHOLE:
                for k in range(m):
                    hs = st.idle[g, k]
                    hosting[s, k] += hs
                    hosted[s, k] += st.free[g, k] * hs
            else:
                for k in range(m):
                    hs = st.present[g, k] & (st.free[g, k] >= mems[s])
                    hosting[s, k] += hs
                    hosted[s, k] += st.free[g, k] * hs


@kernel
def _block_value(st, m, counts, shares, hosting, hosted, out):
    """``_value`` (F before) for every node of the block, shares summed in mix order."""
    for k in range(m):
        out[k] = 0.0
    for s in range(counts.shape[0]):
        for k in range(m):
            total = st.sum_free[k]
            out[k] = out[k] + shares[s] * (
                total - hosted[s, k] if hosting[s, k] >= counts[s] else total
            )


@kernel
def _block_pick(st, m, counts, mems, shares, hosting, hosted, tie_by_free, f, best, pick):
    """Per node of the block: the candidate slot whose trial gives the least F (``_trial``
    for every slot, the same terms in the same order), ties as ``_greedy`` breaks them."""
    for k in range(m):
        best[k], pick[k] = np.inf, -1
    for j in range(st.free.shape[0]):
        for k in range(m):
            f[k] = 0.0
        for s in range(counts.shape[0]):
            if mems[s] == WHOLE:
                for k in range(m):
                    fj, total = st.free[j, k], st.sum_free[k]
                    after_total = total - fj + max(fj - st.unit[j, k], 0)
                    host = st.idle[j, k]
                    unusable = after_total - (hosted[s, k] - fj * host)
                    f[k] = f[k] + shares[s] * (
                        unusable if hosting[s, k] - host >= counts[s] else after_total
                    )
            else:
                for k in range(m):
                    fj, total = st.free[j, k], st.sum_free[k]
                    left = max(fj - st.unit[j, k], 0)
                    after_total = total - fj + left
                    host = st.present[j, k] & (fj >= mems[s])
                    gained = left >= mems[s]
                    unusable = after_total - (hosted[s, k] - fj * host + left * gained)
                    f[k] = f[k] + shares[s] * (
                        unusable if hosting[s, k] - host + gained >= counts[s] else after_total
                    )
        for k in range(m):
            tied = f[k] == best[k] and tie_by_free and st.headroom[j, k] < st.headroom[pick[k], k]
            if st.cand[j, k] and (f[k] < best[k] or tied):
                best[k], pick[k] = f[k], j


@kernel
def _one_fill(t, committed, unit):
    """``policy.chosen_fill_after`` of one unit on a slot of ``t`` MiB."""
    return min(t, committed + unit) / t if t > 0 else 0.0


@kernel
def _one_node_fill(st, k, g, node_total, node_committed):
    """``policy.node_fill_after`` of one unit on slot g of block node k."""
    return min(1.0, (node_committed + st.unit[g, k]) / node_total) if node_total > 0 else 0.0


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
def _trial(j, free, idle, present, unit, total, hosting, hosted, counts, mems, shares):
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
