"""Many nodes at once: the arrays scoring works on when a request names thousands of nodes.

A ``GpuBatch`` is the columnar form of a list of ``NodeView``: per-GPU arrays are
[G, N], slot k of every node in one contiguous row (slot-major: a sum over a node's
GPUs is then G vector adds, ~10x faster than a reduction over a short inner axis); a
node's plain GPUs fill its slots in GPU-index order ("lowest slot" = "lowest index"),
padded with absent slots. Policies score a whole batch with NumPy in a few passes instead of one
Python call per node, and the results equal the per-node path bit for bit (the tests
compare them): the arithmetic is integer MiB until the last division, done in the same
order. MIG units are not columns (MIG demands take the per-node path); what node-level
scores need of them is folded into ``node_total``/``node_committed``/``mig_busy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from extender.scoring.model import GpuDemand, Limits, NodeView
from extender.scoring.rowstates import RowStates, state_of

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
T = TypeVar("T", bound=np.generic)
FAR = np.iinfo(np.int64).max // 4  # a sort key larger than any real MiB figure
# free CPU (milli) or memory (MiB) of a node whose allocatable is not known: more than any
# pod asks, and still far from overflow when a request is subtracted
ROOMY = 1 << 60
WHOLE = -1  # the ask of a whole-GPU demand or mix shape, as the vectorised policies take it


@dataclass(frozen=True, slots=True)
class GpuBatch:
    total: Ints  # [G, N] MiB; 0 in absent slots
    committed: Ints  # [G, N] GpuView.committed_mib (extender.state.committed)
    reserved: Ints  # [G, N] by active grants
    present: Bools  # [G, N] a plain GPU sits in the slot
    node_total: Ints  # [N] every unit's memory, MIG instances included
    node_committed: Ints  # [N] sum of min(committed, total) over every unit
    spot: Bools  # [N] capacity type is spot
    cpu_alloc: Ints  # [N] allocatable CPU, milli; 0: not known
    cpu_free: Ints  # [N] allocatable - requested CPU, milli; ROOMY when not known
    mem_alloc: Ints  # [N] allocatable memory, MiB; 0: not known
    mem_free: Ints  # [N] allocatable - requested memory, MiB; ROOMY when not known
    model: npt.NDArray[np.object_]  # [N] canonical GPU model ("" without plain GPUs)
    mig_busy: Bools  # [N] some MIG instance on the node is not idle
    # [N] an id per node state, equal for rows equal in every ``ROW_FIELDS`` value, each
    # below N (``rowstates``): the kernel places a shape once per state. None: not known
    state: Ints | None = None

    def __len__(self) -> int:
        return int(self.node_total.shape[0])

    def free(self, lim: Limits) -> Ints:
        """Headroom per slot (may be negative), as ``GpuView.free_mib``."""
        return self.total - self.committed - lim.margin_mib

    def idle(self, lim: Limits) -> Bools:
        return self.present & (self.reserved == 0) & (self.committed <= lim.idle_mib)

    def can_hold(self, demand: GpuDemand, lim: Limits) -> Bools:
        """``fit.can_hold`` per slot, for plain (non-MIG) demands."""
        if demand.memory_mib is None:
            return self.idle(lim)
        return self.present & (self.free(lim) >= demand.memory_mib)

    def unit(self, demand: GpuDemand) -> Ints:
        """``fit.unit_mib`` per slot: the ask, or the whole GPU."""
        if demand.memory_mib is None:
            return self.total
        return np.full_like(self.total, demand.memory_mib)

    def size(self) -> tuple[int, int]:
        """(slots, nodes): the [G, N] shape of the per-GPU arrays."""
        g, n = self.total.shape
        return int(g), int(n)

    def kernel_args(self) -> tuple[np.ndarray, ...]:
        """The arrays ``kernel.c`` reads (its ``Batch``, ``args.h``), in its order, C-contiguous (no
        copy where they already are, as the inventory's columns are)."""
        return tuple(contiguous(getattr(self, f)) for f in _FIELDS[:11])

    def take(self, nodes: Bools | Ints) -> GpuBatch:
        """The batch of these nodes (a mask or positions); per-GPU arrays stay
        contiguous, which the slot-major arithmetic relies on for its speed."""
        if nodes.dtype == bool:
            nodes = np.flatnonzero(nodes)
        # without state ids: renumbering them below the new length takes a sort, in the
        # filter of every policy that scores taken rows (binpack, spread, gpu-packing),
        # and none of those reads them
        taken = {f: getattr(self, f).take(nodes, axis=1 if f in _GRID else None) for f in _FIELDS}
        return GpuBatch(**taken)

    @staticmethod
    def from_views(views: Sequence[NodeView], lim: Limits) -> GpuBatch:
        """The batch for these views (tests and small requests; the inventory keeps its
        own columns up to date instead of rebuilding them)."""
        width = max((plain_count(v) for v in views), default=0)
        rows = [row_of(v, width) for v in views]
        states = RowStates()
        state = np.array([states.acquire(state_of(r)) for r in rows], dtype=np.int64)
        arrays = {}
        for k, name in enumerate(ROW_FIELDS):
            kind = bool if name in _BOOL else object if name == "model" else np.int64
            arr = np.array([r[k] for r in rows], dtype=kind)
            arrays[name] = arr.reshape(len(rows), width).T.copy() if k < 4 else arr
        busy = [any(not g.idle(lim.idle_mib) for g in v.gpus if g.mig_profile) for v in views]
        return GpuBatch(**arrays, mig_busy=np.array(busy, dtype=bool), state=state)


_FIELDS = (
    "total",
    "committed",
    "reserved",
    "present",
    "node_total",
    "node_committed",
    "spot",
    "cpu_alloc",
    "cpu_free",
    "mem_alloc",
    "mem_free",
    "model",
    "mig_busy",
)
_GRID = _FIELDS[:4]  # [G, N]
ROW_FIELDS = _FIELDS[:-1]  # what ``row_of`` gives; MIG idleness depends on the limits
_BOOL = {"present", "mig_busy", "spot"}


def contiguous(a: npt.NDArray[T]) -> npt.NDArray[T]:
    """``a`` C-contiguous, as the compiled kernel reads arrays (no copy when it is)."""
    return np.ascontiguousarray(a)


def plain_count(view: NodeView) -> int:
    return sum(1 for g in view.gpus if not g.mig_profile)


def row_of(view: NodeView, width: int) -> tuple:
    """One node's values in ``ROW_FIELDS`` order, plain GPUs sorted by index."""
    plain = sorted((g for g in view.gpus if not g.mig_profile), key=lambda g: g.index)
    pad = [0] * (width - len(plain))
    return (
        [g.total_mib for g in plain] + pad,
        [g.committed_mib for g in plain] + pad,
        [g.reserved_mib for g in plain] + pad,
        [True] * len(plain) + [False] * len(pad),
        view.total_mib,
        view.committed_mib,
        view.capacity_type == "spot",
        view.cpu_allocatable_milli,
        _free(view.cpu_allocatable_milli, view.cpu_requested_milli),
        view.memory_allocatable_mib,
        _free(view.memory_allocatable_mib, view.memory_requested_mib),
        view.model,
    )


def _free(allocatable: int, requested: int) -> int:
    return allocatable - requested if allocatable > 0 else ROOMY


def host_fits(b: GpuBatch, rows: Ints, demand: GpuDemand) -> Bools:
    """Per row, whether the pod's CPU and memory requests fit the node (``NodeView.
    host_room``: unknown allocatable never refuses)."""
    return (b.cpu_free[rows] >= demand.cpu_milli) & (b.mem_free[rows] >= demand.host_memory_mib)


# --- what policies share -----------------------------------------------------------------


def ordered_slots(key: Ints, hold: Bools, count: int) -> Ints:
    """Per node, the ``count`` holding slots with the smallest key (ties: lowest slot),
    as [count, N]."""
    masked = np.where(hold, key, FAR)
    return np.argsort(masked, axis=0, kind="stable")[:count]


def best_fit_slots(b: GpuBatch, hold: Bools, count: int, lim: Limits) -> Ints:
    """``policy.best_fit``: least headroom first, ties lowest index."""
    return ordered_slots(b.free(lim), hold, count)


def picked(values: npt.NDArray[T], slots: Ints) -> npt.NDArray[T]:
    """values[slots[k, n], n] for every node n and k."""
    return values[slots, np.arange(slots.shape[1])]


def chosen_fill_after(b: GpuBatch, demand: GpuDemand, slots: Ints) -> Floats:
    """``policy.chosen_fill_after`` per row for its chosen slots (``slots``: [count, N]).
    Integer sums in slot order, then one division, as the per-node reference does."""
    ask, cols = ask_of(demand), np.arange(slots.shape[1])
    t = np.zeros(len(cols), np.int64)
    used = np.zeros(len(cols), np.int64)
    for k in range(slots.shape[0]):
        tk = b.total[slots[k], cols]
        t += tk
        used += np.minimum(tk, b.committed[slots[k], cols] + (tk if ask == WHOLE else ask))
    return _ratio(used, t)


def node_fill_after(b: GpuBatch, demand: GpuDemand, slots: Ints) -> Floats:
    """``policy.node_fill_after`` per row once a unit sits on each of its chosen slots."""
    ask, cols = ask_of(demand), np.arange(slots.shape[1])
    added = np.zeros(len(cols), np.int64)
    for k in range(slots.shape[0]):
        added += b.total[slots[k], cols] if ask == WHOLE else ask
    return np.minimum(1.0, _ratio(b.node_committed + added, b.node_total))


def unfit(fits: Bools) -> Ints:
    """Positions of the nodes that do not fit, ascending."""
    return np.flatnonzero(~fits)


def ask_of(demand: GpuDemand) -> int:
    """The memory asked per GPU, or WHOLE: the vectorised policies take plain integers."""
    return WHOLE if demand.memory_mib is None else int(demand.memory_mib)


def host_fill_at(b: GpuBatch, gpu_fill: Floats, demand: GpuDemand, rows: Ints) -> Floats:
    """``policy.host_fill_after`` of each row of ``rows`` given its GPU fill after."""
    alloc = b.cpu_alloc[rows]
    requested = alloc - b.cpu_free[rows] + demand.cpu_milli
    cpu = np.minimum(1.0, _ratio(requested, alloc))
    return np.where(alloc > 0, 0.5 * gpu_fill + 0.5 * cpu, gpu_fill)


def _ratio(part: Ints, whole: Ints) -> Floats:
    """part / whole, 0 where whole is 0."""
    out = np.zeros(len(whole))
    np.divide(part, whole, out=out, where=whole > 0)
    return out
