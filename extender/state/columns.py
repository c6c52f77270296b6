"""The inventory in columns: each node a row of arrays, so a request naming 5,000 nodes is
scored by a vectorised pass over its rows, in place (``whole``; ``scoring.fragmentation``),
or a few NumPy passes over rows taken out (``scoring.batch``), not 5,000 Python calls.
Each row carries the change number of its last write, so request plans find what
changed since they were made without looking up names (``changed``). A candidate list
read into the HTTP decoder's ids finds its rows by those ids, told at report intake
(``name_known``), not by a look-up per name.

A derived index, never the source of truth: the inventory rewrites a node's row from its
``NodeView`` whenever the node changed (before the next read), and writes report times
as reports arrive. Rows of nodes that left are reused. Not locked itself: the inventory
writes it under its lock, and only the event loop reads it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from itertools import repeat

import numpy as np

from extender.scoring import kernel
from extender.scoring.batch import (
    ROW_FIELDS,
    Floats,
    GpuBatch,
    Ints,
    plain_count,
    row_of,
)
from extender.scoring.model import Limits, NodeView
from extender.scoring.rowstates import RowStates, State, state_of
from extender.wire.names import Candidates, names_key, same_names

_GRID = ("total", "committed", "reserved", "present")  # [width, rows], as GpuBatch
UNKNOWN = -2  # a wire id whose node's row the columns were not told (see name_known)
_LINE = (
    "node_total",
    "node_committed",
    "spot",
    "cpu_alloc",
    "cpu_free",
    "mem_alloc",
    "mem_free",
    "model",
    "mig_reserved",
    "mig_committed",
    "price",
    "received",
    "stamp",
    "state",
)  # [rows]


class NodeColumns:
    def __init__(self, capacity: int = 256, width: int = 1) -> None:
        self._rows: dict[str, int] = {}
        self._spare: list[int] = []
        self._used = 0
        self._layout = 0  # changes whenever a name gets or loses a row
        self._recent: dict[Hashable, tuple[int, Sequence[str], Ints, Ints | None]] = {}
        self._whole: tuple[int, GpuBatch] | None = None  # (idle MiB, batch): see whole()
        self.total = self.committed = self.reserved = np.zeros((0, 0), dtype=np.int64)
        self.present = np.zeros((0, 0), dtype=bool)
        self.node_total = self.node_committed = self.mig_committed = np.zeros(0, np.int64)
        self.stamp = np.zeros(0, np.int64)  # the inventory's change number at the last write
        # per row, the id of its values' state (``scoring.rowstates``); -1: none written
        self.state = np.zeros(0, np.int64)
        self._states = RowStates()
        # the whole node, as ``GpuBatch`` holds it (ROOMY free: allocatable unknown)
        self.cpu_alloc = self.cpu_free = np.zeros(0, np.int64)
        self.mem_alloc = self.mem_free = np.zeros(0, np.int64)
        self.model = np.zeros(0, dtype=object)
        self.spot = self.mig_reserved = np.zeros(0, dtype=bool)  # mig_reserved: a MIG
        self.price = self.received = np.zeros(0)  # instance is granted; NaN: unknown/none
        # the decoder's ids of reported nodes' names (see ``name_known``): per id its
        # row (-1: none, UNKNOWN: not told), valid for lists carrying ``_token``
        self._token: object = None
        self._wire: dict[str, int] = {}
        self._by_id = np.zeros(0, np.int64)
        self._grow(capacity, width)

    def _grow(self, capacity: int, width: int) -> None:
        self._whole = None  # its arrays are the old ones
        w, n = self.total.shape
        for name in _GRID:
            old = getattr(self, name)
            new = np.zeros((width, capacity), dtype=old.dtype)
            new[:w, :n] = old
            setattr(self, name, new)
        for name in _LINE:
            old = getattr(self, name)
            new = np.full(capacity, np.nan) if old.dtype == float else np.zeros(capacity, old.dtype)
            if name == "state":
                new.fill(-1)
            new[:n] = old
            setattr(self, name, new)

    # --- writes (the inventory, under its lock) ----------------------------------------

    def write(self, view: NodeView, received: float, schedulable: bool, stamp: int) -> None:
        """The node's row from its view; a node that may get no new pods (disrupted,
        draining) has no report time in its row, so it is never available. ``stamp``: the
        inventory's change number, at least that of the change written (see changed())."""
        width, capacity = self.total.shape
        if plain_count(view) > width:
            self._grow(capacity, plain_count(view))
        row = self._row_for(view.name)
        values = row_of(view, self.total.shape[0])
        for name, value in zip(ROW_FIELDS, values, strict=True):
            if name in _GRID:
                getattr(self, name)[:, row] = value
            else:
                getattr(self, name)[row] = value
        self._state_is(row, state_of(values))
        mig = [g for g in view.gpus if g.mig_profile]
        self.mig_reserved[row] = any(g.reserved_mib > 0 for g in mig)
        self.mig_committed[row] = max((g.committed_mib for g in mig), default=0)
        price = view.price_per_gib_hour
        self.price[row] = np.nan if price is None else price
        self.received[row] = received if schedulable else np.nan
        self.stamp[row] = stamp
        if self._whole is not None:
            idle, batch = self._whole
            batch.mig_busy[row] = self.mig_reserved[row] or self.mig_committed[row] > idle

    def set_received(self, name: str, received: float) -> None:
        row = self._rows.get(name)
        if row is not None and not np.isnan(self.received[row]):
            self.received[row] = received

    def drop(self, name: str) -> None:
        row = self._rows.pop(name, None)
        if row is not None:
            self._state_is(row, None)
            self.received[row] = np.nan
            self._spare.append(row)
            self._layout += 1
            self._row_is(name, -1)

    def _state_is(self, row: int, state: State | None) -> None:
        """The row's state id, for ``state`` (None: the row is let go). The old id is
        released first, so ids in use never outnumber rows (each stays below the
        capacity, as the kernel requires)."""
        old = int(self.state[row])
        if old >= 0:
            self._states.release(old)
        self.state[row] = -1 if state is None else self._states.acquire(state)

    def name_known(self, name: str, token: object, wire_id: int) -> None:
        """The HTTP edge's decoder reads the node's name as ``wire_id`` in lists that
        carry ``token`` (``Candidates.ids``): told at report intake, so the first list
        after a start finds its rows by one array look-up (``rows``) instead of a dict
        look-up per name, cold in memory after thousands of reports. Kept as rows come
        and go; another token (the decoder's index started over) starts it over."""
        if token is not self._token:
            self._token, self._wire = token, {}
            self._by_id = np.full(len(self._by_id), UNKNOWN, np.int64)
        if wire_id >= len(self._by_id):
            grown = np.full(max(2 * len(self._by_id), wire_id + 1, 256), UNKNOWN, np.int64)
            grown[: len(self._by_id)] = self._by_id
            self._by_id = grown
        self._wire[name] = wire_id
        self._by_id[wire_id] = self._rows.get(name, -1)

    def _row_is(self, name: str, row: int) -> None:
        wire_id = self._wire.get(name)
        if wire_id is not None:
            self._by_id[wire_id] = row

    def _row_for(self, name: str) -> int:
        row = self._rows.get(name)
        if row is not None:
            return row
        if self._spare:
            row = self._spare.pop()
        else:
            width, capacity = self.total.shape
            if self._used == capacity:
                self._grow(2 * capacity, width)
            row, self._used = self._used, self._used + 1
        self._rows[name] = row
        self._layout += 1
        self._row_is(name, row)
        return row

    # --- reads (the event loop) --------------------------------------------------------

    @property
    def layout(self) -> int:
        """Changes whenever a name gets or loses a row: row numbers read before are void."""
        return self._layout

    def changed(self, rows: Ints, layout: int, since: int) -> Ints | None:
        """Positions in ``rows`` (read at ``layout``) whose row was written after change
        number ``since``, ascending; None if the layout changed (the rows are void). What
        request plans re-evaluate: one pass over row stamps, no names looked up."""
        if layout != self._layout:
            return None
        return _changed(self.stamp, rows, since)

    def rows(self, names: Sequence[str]) -> Ints:
        """Each name's row; -1 for a node without one (never reported, or gone).

        Long candidate lists come back for every pod (the same nodes, a new shape), so
        their rows are kept until a node gets or loses a row; an interned list
        (``namelists``) is recognised by identity, any other by comparing it."""
        if len(names) < 256:
            return self._look_up(names)
        key = names_key(names)
        hit = self._recent.get(key)
        if hit is not None and hit[0] == self._layout and same_names(hit[1], names):
            return hit[2]
        rows = self._look_up(names)
        if len(self._recent) >= 8:
            self._recent.clear()
        self._recent[key] = (self._layout, names, rows, _ascending(rows))
        return rows

    def ascending(self, rows: Ints) -> Ints | None:
        """For rows ``rows()`` returned for a long list: the positions that read them in
        ascending row order, kept with them; None when they are in order already or are
        not such rows. Rows are given as nodes first report, candidates come in the
        scheduler's order: read in that order every node's values are a cache line of
        their own, read in row order they run on (and FGD reads runs as slices)."""
        for layout, _, kept, order in self._recent.values():
            if kept is rows and layout == self._layout:
                return order
        return None

    def _look_up(self, names: Sequence[str]) -> Ints:
        """By the decoder's ids where it told their rows (``name_known``), the rest (and
        lists of other origins) by name."""
        ids = None
        if isinstance(names, Candidates) and self._token is not None:
            ids = names.ids if names.token is self._token else None
        if ids is not None:
            rows = _rows_of(self._by_id, ids)
            for i in np.flatnonzero(rows == UNKNOWN).tolist():
                rows[i] = self._rows.get(names[i], -1)
            return rows
        found = map(self._rows.get, names, repeat(-1))
        return np.fromiter(found, dtype=np.int64, count=len(names))

    def read(self, rows: Ints, now: float, stale_after: float) -> tuple[Ints, Floats, Floats]:
        """Per row: itself if the node is available (reported, fresh, schedulable; -1 if
        not), and its $/GiB-h and report time (NaN unless available). Freshness is
        the per-node test in the same arithmetic,
        ``now - received_at <= stale_after`` (NaN: never reported, compares False), in
        one loop in the kernel (eleven NumPy calls before)."""
        n = len(rows)
        out = (np.empty(n, np.int64), np.empty(n), np.empty(n))
        kernel.fresh(self.received, self.price, rows, float(now), float(stale_after), out)
        return out

    def whole(self, lim: Limits) -> GpuBatch:
        """Every row as a batch, without copying: policies that read rows in place take
        this and row numbers (``fragmentation.greedy_scores``). Its arrays are the
        columns themselves, and ``write`` keeps its MIG column current, so it is built
        again only when the columns grow or the limits change."""
        if self._whole is None or self._whole[0] != lim.idle_mib:
            busy = self.mig_reserved | (self.mig_committed > lim.idle_mib)
            batch = GpuBatch(
                self.total,
                self.committed,
                self.reserved,
                self.present,
                self.node_total,
                self.node_committed,
                self.spot,
                self.cpu_alloc,
                self.cpu_free,
                self.mem_alloc,
                self.mem_free,
                self.model,
                busy,
                self.state,
            )
            self._whole = (lim.idle_mib, batch)
        return self._whole[1]


def _rows_of(by_id: Ints, ids: Ints) -> Ints:
    """``by_id[ids]`` as a new array, UNKNOWN for ids past its end."""
    if not len(ids) or int(ids.max()) < len(by_id):
        return by_id[ids]
    rows = np.full(len(ids), UNKNOWN, np.int64)
    inside = ids < len(by_id)
    rows[inside] = by_id[ids[inside]]
    return rows


def _ascending(rows: Ints) -> Ints | None:
    """Positions in ascending row order (unavailable nodes, -1, first, in list order); None
    if in order. A list of distinct names has distinct rows but for -1, so the order is
    placed by one scatter over the row numbers instead of a sort (a list naming a node
    twice is sorted: the same order, stably)."""
    if _in_order(rows):
        return None
    live = rows >= 0
    none, at = np.flatnonzero(~live), np.flatnonzero(live)
    by_row = np.full(int(rows.max()) + 1, -1, np.int64)
    by_row[rows[at]] = at
    placed = by_row[by_row >= 0]
    if len(placed) != len(at):
        return np.argsort(rows, kind="stable")
    return np.concatenate([none, placed])


def _in_order(rows: Ints) -> bool:
    return bool((rows[1:] >= rows[:-1]).all())


def _changed(stamp: Ints, rows: Ints, since: int) -> Ints:
    if not len(stamp):
        return np.zeros(0, np.int64)
    return np.flatnonzero((rows >= 0) & (stamp[np.maximum(rows, 0)] > since))
