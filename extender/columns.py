"""The inventory in columns: each node a row of arrays, so a request naming 5,000 nodes is
scored with a few NumPy passes (``scoring.batch``) instead of 5,000 Python calls.

A derived index, never the source of truth: the inventory rewrites a node's row from its
``NodeView`` whenever the node changed (before the next read), and writes report times
as reports arrive. Rows of nodes that left are reused. Not locked itself: the inventory
writes it under its lock, and only the event loop reads it.
"""

from __future__ import annotations

from collections.abc import Hashable
from itertools import repeat

import numpy as np

from extender.namelists import names_key, same_names
from extender.scoring.batch import (
    ROW_FIELDS,
    Bools,
    Floats,
    GpuBatch,
    Ints,
    plain_count,
    row_of,
)
from extender.scoring.model import Limits, NodeView

_GRID = ("total", "committed", "reserved", "present")  # [width, rows], as GpuBatch
_LINE = ("node_total", "node_committed", "spot", "mig_reserved", "mig_committed", "price",
         "received", "plain")  # [rows]


class NodeColumns:
    def __init__(self, capacity: int = 256, width: int = 1) -> None:
        self._rows: dict[str, int] = {}
        self._spare: list[int] = []
        self._used = 0
        self._layout = 0  # changes whenever a name gets or loses a row
        self._recent: dict[Hashable, tuple[int, list[str], Ints]] = {}
        self.total = self.committed = self.reserved = np.zeros((0, 0), dtype=np.int64)
        self.present = np.zeros((0, 0), dtype=bool)
        self.node_total = self.node_committed = self.mig_committed = np.zeros(0, np.int64)
        self.plain = np.zeros(0, np.int64)  # plain GPUs: the row's slots in use
        self.spot = self.mig_reserved = np.zeros(0, dtype=bool)  # mig_reserved: a MIG
        self.price = self.received = np.zeros(0)  # instance is granted; NaN: unknown/none
        self._grow(capacity, width)

    def _grow(self, capacity: int, width: int) -> None:
        w, n = self.total.shape
        for name in _GRID:
            old = getattr(self, name)
            new = np.zeros((width, capacity), dtype=old.dtype)
            new[:w, :n] = old
            setattr(self, name, new)
        for name in _LINE:
            old = getattr(self, name)
            new = np.full(capacity, np.nan) if old.dtype == float else np.zeros(capacity,
                                                                                 old.dtype)
            new[:n] = old
            setattr(self, name, new)

    # --- writes (the inventory, under its lock) ----------------------------------------

    def write(self, view: NodeView, received: float, schedulable: bool) -> None:
        """The node's row from its view; a node that may get no new pods (disrupted,
        draining) has no report time in its row, so it is never available."""
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
        self.plain[row] = plain_count(view)
        mig = [g for g in view.gpus if g.mig_profile]
        self.mig_reserved[row] = any(g.reserved_mib > 0 for g in mig)
        self.mig_committed[row] = max((g.committed_mib for g in mig), default=0)
        price = view.price_per_gib_hour
        self.price[row] = np.nan if price is None else price
        self.received[row] = received if schedulable else np.nan

    def set_received(self, name: str, received: float) -> None:
        row = self._rows.get(name)
        if row is not None and not np.isnan(self.received[row]):
            self.received[row] = received

    def drop(self, name: str) -> None:
        row = self._rows.pop(name, None)
        if row is not None:
            self.received[row] = np.nan
            self._spare.append(row)
            self._layout += 1

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
        return row

    # --- reads (the event loop) --------------------------------------------------------

    def rows(self, names: list[str]) -> Ints:
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
        self._recent[key] = (self._layout, names, rows)
        return rows

    def _look_up(self, names: list[str]) -> Ints:
        found = map(self._rows.get, names, repeat(-1))
        return np.fromiter(found, dtype=np.int64, count=len(names))

    def available(self, rows: Ints, now: float, stale_after: float) -> Bools:
        """Reported, fresh and schedulable: the same test, in the same arithmetic, as the
        per-node ``now - received_at > stale_after`` (NaN, never reported, compares
        False without a warning)."""
        return (now - self.received_at(rows)) <= stale_after

    def received_at(self, rows: Ints) -> Floats:
        return np.where(rows >= 0, self.received[rows], np.nan)

    def batch(self, rows: Ints, lim: Limits) -> GpuBatch:
        """These rows, as wide as their largest node (not the fleet's)."""
        w = int(self.plain[rows].max()) if rows.size else 0
        return GpuBatch(
            total=self.total[:w].take(rows, axis=1),  # take: contiguous, and 4x faster
            committed=self.committed[:w].take(rows, axis=1),  # than [:w, rows]
            reserved=self.reserved[:w].take(rows, axis=1),
            present=self.present[:w].take(rows, axis=1),
            node_total=self.node_total.take(rows),
            node_committed=self.node_committed.take(rows),
            spot=self.spot.take(rows),
            mig_busy=self.mig_reserved.take(rows) | (self.mig_committed.take(rows) > lim.idle_mib),
        )

    def prices(self, rows: Ints) -> Floats:
        return np.where(rows >= 0, self.price[rows], np.nan)
