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

Vectorised over the nodes and the mix: each step below is a NumPy operation on
[shape, slot, node], [shape, node] or [node] arrays, looping in Python only over slots
and units (a handful each) and, to add the shares in mix order, shapes. The number of
NumPy calls, not their size, is what a pass costs at 5,000 nodes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from extender.scoring.batch import (
    WHOLE,
    Bools,
    Floats,
    GpuBatch,
    Ints,
    added_at,
    ask_of,
    chosen_fill_at,
    host_fits,
    node_fill_at,
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
from extender.scoring.stranding import stranding_delta

Mix = Sequence[tuple[ShapeLike, float]]


# MiB in the placement's arrays: whole numbers, exact in a float64 (to 2^53), so sums
# and differences are exact too, and F's weighted sum takes them with no conversion
MIB = np.float64
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
    rule, ``demand.count`` slots that ``can_hold`` a unit) and, where it does, the score
        -(F after placing every unit - F before) / GiB - stranding x dS + tie x fill
    dS: ``stranding.stranding_delta``; fill: 0.5 x the chosen GPUs' fill after + 0.5 x
    the node's (GPU memory); 0 where it does not fit.
    Ties on F go to the slot with least headroom when ``tie_by_free`` (the ``headroom``
    policy), then to the lowest index (both FGD policies).

    Rows are read in place (gathered once per slot), not taken into a batch first."""
    plain = _plain(tuple(mix))
    at = np.arange(len(b), dtype=np.int64) if rows is None else np.asarray(rows, np.int64)
    ok = at >= 0
    r = np.where(ok, at, 0)
    rule = _RULES[demand.capacity]
    if rule == ON_DEMAND_ONLY:
        ok &= ~b.spot[r]
    elif rule == SPOT_ONLY:
        ok &= b.spot[r]
    ok &= host_fits(b, r, demand)
    ask = ask_of(demand)
    st = _state(b, r, lim, ask)
    fits = ok & (st.cand.sum(axis=0) >= demand.count)
    raw = np.zeros(len(at))
    if not fits.any():
        return fits, raw
    if not fits.all():  # the fitting columns of the same state, not a second one
        r = r[fits]
        st = _State(*(a.compress(fits, axis=1) for a in st))
    rooms = _rooms(b, r, plain, demand)
    before, after, slots = _place(st, int(demand.count), plain, rooms, tie_by_free)
    fill = strand = np.zeros(len(r))
    added = added_at(b.total, ask, slots, r)
    if tie != 0.0:
        node = node_fill_at(b.node_total, b.node_committed, added, r)
        fill = 0.5 * chosen_fill_at(b.total, b.committed, ask, slots, r) + 0.5 * node
    if stranding != 0.0:
        strand = stranding_delta(b, r, tuple(mix), demand, added.astype(np.float64))
    raw[fits] = -((after - before) / 1024) - stranding * strand + tie * fill
    return fits, raw


def fragmentation_of(b: GpuBatch, lim: Limits, mix: Mix) -> Floats:
    """F per node of ``b`` (MiB, as float64)."""
    plain = _plain(tuple(mix))
    r = np.arange(len(b), dtype=np.int64)
    st = _state(b, r, lim, WHOLE)
    return _value(st.free.sum(axis=0), _terms(st, plain), plain, _room(b, r, plain))


def host_delta(b: GpuBatch, rows: Ints, demand: GpuDemand, lim: Limits, mix: Mix) -> Floats:
    """F after - F before per row of ``rows`` for a pod that takes only CPU and memory (no
    GPU): the free GPU memory it makes unusable for the mix by leaving too little host
    room for a shape (FGD scores such pods by the same F as any other)."""
    plain = _plain(tuple(mix))
    st = _state(b, rows, lim, WHOLE)
    total, terms = st.free.sum(axis=0), _terms(st, plain)
    before, after = _rooms(b, rows, plain, demand)
    return _value(total, terms, plain, after) - _value(total, terms, plain, before)


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
    b, st, gpus = _one(node, lim, ask_of(demand))
    slot = {g.uuid: k for k, g in enumerate(gpus)}
    st.cand[:] = False
    for g in fitting:
        st.cand[slot[g.uuid], 0] = True
    plain = _plain(tuple(mix))
    r = np.zeros(1, np.int64)
    rooms = _rooms(b, r, plain, demand)
    slots = _place(st, int(demand.count), plain, rooms, tie_by_free)[2]
    return tuple(gpus[k] for k in slots[:, 0].tolist())


def fragmentation_delta(
    node: NodeView, demand: GpuDemand, chosen: Sequence[GpuView], lim: Limits, mix: Mix
) -> float:
    """F after one unit of a plain demand sits on each ``chosen`` GPU - F before (MiB)."""
    b, st, gpus = _one(node, lim, ask_of(demand))
    slot = {g.uuid: k for k, g in enumerate(gpus)}
    plain = _plain(tuple(mix))
    rooms = _rooms(b, np.zeros(1, np.int64), plain, demand)
    before = _value(st.free.sum(axis=0), _terms(st, plain), plain, rooms[0])
    for g in chosen:
        k = slot[g.uuid]
        st.free[k, 0] = max(st.free[k, 0] - st.unit[k, 0], 0)
        st.idle[k, 0] = False
    after = _value(st.free.sum(axis=0), _terms(st, plain), plain, rooms[1])
    return float(after[0] - before[0])


def _one(node: NodeView, lim: Limits, ask: int) -> tuple[GpuBatch, _State, list[GpuView]]:
    """One node's batch, state ([slot, 1]) and plain GPUs in slot (index) order."""
    b = GpuBatch.from_views([node], lim)
    plain = sorted((g for g in node.gpus if not g.mig_profile), key=lambda g: g.index)
    return b, _state(b, np.zeros(1, np.int64), lim, ask), plain


class _State(NamedTuple):
    """The slots of the nodes being placed on, [slot, node] (``GpuBatch.free`` etc.)."""

    headroom: Ints
    free: Floats  # MiB, whole (``MIB``)
    unit: Floats  # MiB a unit takes
    present: Bools
    idle: Bools
    cand: Bools  # can hold one unit of the demand


def _state(b: GpuBatch, r: Ints, lim: Limits, ask: int) -> _State:
    # ``take``, not ``[:, r]``: that gives a column-major array, whose per-node sums over
    # slots (``sum(axis=0)``, dozens per placement) then run one tiny reduction per node
    total, committed = b.total.take(r, axis=1), b.committed.take(r, axis=1)
    present = b.present.take(r, axis=1)
    headroom = total - committed - int(lim.margin_mib)
    free = (np.maximum(headroom, 0) * present).astype(MIB)
    idle = present & (b.reserved.take(r, axis=1) == 0) & (committed <= int(lim.idle_mib))
    unit = total.astype(MIB) if ask == WHOLE else np.full_like(free, ask)
    cand = idle if ask == WHOLE else present & (headroom >= ask)
    return _State(headroom, free, unit, present, idle, cand.copy())


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
        np.array([WHOLE if s.memory_mib is None else s.memory_mib for s, _ in plain], MIB),
        np.array([p for _, p in plain], dtype=np.float64),
        np.array([s.cpu_milli for s, _ in plain], dtype=np.int64),
        np.array([s.host_memory_mib for s, _ in plain], dtype=np.int64),
        tuple(tuple(sorted(s.models)) for s, _ in plain),
    )


class _Room(NamedTuple):
    """[shape, node]: whether the node has the host room to run a pod of each shape, and
    each shape's weight there: its share where the node's GPU model is one the shape may
    use, else 0 (a GPU a shape can never use is outside that shape's F, see below)."""

    host: Bools
    weights: Floats


def _room(
    b: GpuBatch,
    r: Ints,
    plain: _Plain,
    pod: GpuDemand | None = None,
    weights: Floats | None = None,
) -> _Room:
    """The node's room as ``pod``, when given, leaves it: free CPU and host memory against
    each shape's, and the model rule.

    Why a disallowed model weighs 0 rather than counting all free memory as fragmented
    (FGD's wording): FGD measures in GPU shares, where every GPU is 1,000 milli; here F is
    in MiB, so "all free memory" of a node the shape cannot use shrinks by whatever a pod
    takes there, and the measure rewarded putting whole-GPU pods on the largest GPUs that
    constrained shapes may not use. On the synthetic cluster (six models, 16-80 GiB) that
    cost 4.4 points of allocation at 100 % arrived; on openb (every GPU 16,000 MiB) it
    changed nothing (docs/scheduling.md)."""
    cpu, mem = b.cpu_free[r], b.mem_free[r]
    if pod is not None:
        cpu, mem = cpu - pod.cpu_milli, mem - pod.host_memory_mib
    host = (cpu >= plain.cpus[:, None]) & (mem >= plain.host_mibs[:, None])
    return _Room(host, _weights(b, r, plain) if weights is None else weights)


def _rooms(b: GpuBatch, r: Ints, plain: _Plain, pod: GpuDemand) -> tuple[_Room, _Room]:
    """``_room`` before and after ``pod``: the model weights are the same, made once."""
    weights = _weights(b, r, plain)
    return _room(b, r, plain, None, weights), _room(b, r, plain, pod, weights)


def _weights(b: GpuBatch, r: Ints, plain: _Plain) -> Floats:
    """[shape, node] ``_Room.weights``; [shape, 1] (broadcast, nothing per node to make)
    when no shape of the mix names models, as with the learned mix."""
    if not any(plain.models):
        return plain.shares[:, None]
    weights = np.repeat(plain.shares[:, None], len(r), axis=1)
    for k, models in enumerate(plain.models):
        if models:
            weights[k] *= np.isin(b.model[r], models)
    return weights


def _place(
    st: _State,
    count: int,
    plain: _Plain,
    rooms: tuple[_Room, _Room],
    tie_by_free: bool,
) -> tuple[Floats, Floats, Ints]:
    """Places ``count`` units one after another on every node (all fit): F before, F
    after the last unit, and the slots chosen, [unit, node]. ``rooms``: ``_room`` before
    and after the pod. Updates ``st``."""
    n = st.free.shape[1]
    nodes = np.arange(n)
    total = st.free.sum(axis=0)
    slots = np.zeros((count, n), np.int64)
    before = after = np.zeros(n)
    for k in range(count):
        terms = _terms(st, plain)
        if k == 0:
            before = _value(total, terms, plain, rooms[0])
        after, pick = _pick(st, total, terms, plain, rooms[1], tie_by_free)
        slots[k] = pick
        was = st.free[pick, nodes]
        left = np.maximum(was - st.unit[pick, nodes], 0)
        total = total + left - was
        st.free[pick, nodes] = left
        st.idle[pick, nodes] = False
        st.cand[pick, nodes] = False
    return before, after, slots


class _Terms(NamedTuple):
    """Per shape, what the nodes' GPUs can host now: [shape, slot, node] and
    [shape, node]. Computed for all shapes at once, a few operations on the whole
    arrays rather than a few per shape; each slot's trial then reads them."""

    hosts: Bools  # [shape, slot, node] the GPU can host one unit of the shape
    held: Floats  # [shape, slot, node] its free MiB where it can, else 0
    hosting: Ints  # [shape, node] how many GPUs can
    hosted: Floats  # [shape, node] their free MiB
    # [shape, node] hosting - count, clipped to -2..2 (int8): a trial moves hosting by
    # at most one GPU each way, so only whether that reaches the count matters
    spare: np.ndarray


def _terms(st: _State, plain: _Plain) -> _Terms:
    mems, counts = plain.mems, plain.counts
    hosts = st.present & (st.free >= mems[:, None, None])
    hosts[mems == WHOLE] = st.idle
    held = st.free * hosts
    # GPUs counted in 16 bits, summing the booleans' bytes: a bool sum converts each one
    hosting = hosts.view(np.int8).sum(axis=1, dtype=np.int16)
    spare = np.clip(hosting - counts.astype(np.int16)[:, None], -2, 2).astype(np.int8)
    hosted = held.sum(axis=1)
    return _Terms(hosts, held, hosting, hosted, spare)


def _in_mix_order(terms: Floats, weights: Floats) -> Floats:
    """sum_m w_m x terms[m] per node ([shape, node] weights: ``_Room.weights``), added
    shape by shape in mix order (F's definition), so that each F is the same number on
    every path, bit for bit."""
    weighted = weights * terms
    acc = np.zeros(terms.shape[1])
    for row in weighted:
        acc = acc + row
    return acc


def _value(total: Floats, t: _Terms, plain: _Plain, room: _Room) -> Floats:
    """F per node: the shares applied in mix order."""
    usable = room.host & (t.hosting >= plain.counts[:, None])
    return _in_mix_order(np.where(usable, total - t.hosted, total), room.weights)


def _pick(
    st: _State, total: Floats, t: _Terms, plain: _Plain, room: _Room, tie_by_free: bool
) -> tuple[Floats, Ints]:
    """Per node, the candidate slot whose trial placement gives the least F, and that F;
    ties to the least headroom when ``tie_by_free``, then to the lowest slot."""
    n = len(total)
    best, pick = np.full(n, np.inf), np.full(n, -1, np.int64)
    least = np.zeros(n, np.int64)  # the picked slot's headroom (read when f ties best)
    # a shape's bound for what a slot's leftover can still host: none for whole GPUs
    bounds = np.where(plain.mems == WHOLE, np.inf, plain.mems)[:, None]
    for j in range(st.free.shape[0]):
        f = _trial(st, j, total, t, bounds, room)
        better = f < best
        if tie_by_free:
            better |= (f == best) & (st.headroom[j] < least)
            least = np.where(better & st.cand[j], st.headroom[j], least)
        better &= st.cand[j]
        best = np.where(better, f, best)
        pick = np.where(better, j, pick)
    return best, pick


def _trial(st: _State, j: int, total: Floats, t: _Terms, bounds: Floats, room: _Room) -> Floats:
    """F per node if slot j alone took one unit (and so became busy), every shape at
    once ([shape, node]): slot j stops hosting what it hosted, and hosts what its free
    MiB left still can (``bounds``: a busy GPU never hosts a whole one); ``room``: which
    shapes the node can still run once the pod's CPU and memory are taken."""
    fj = st.free[j]
    left = np.maximum(fj - st.unit[j], 0)
    after_total = total - fj + left
    gained = left >= bounds
    # hosting - host + gained >= count, as spare >= host - gained (int8: -1..1)
    fits = room.host & (t.spare >= t.hosts[:, j].view(np.int8) - gained.view(np.int8))
    unusable = after_total - (t.hosted - t.held[:, j] + left * gained)
    return _in_mix_order(np.where(fits, unusable, after_total), room.weights)
