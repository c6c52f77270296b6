"""Node states as small integer ids: rows equal in everything the scoring kernel reads of
them get one id, so a new pod shape is placed once per state, not once per node.

A fleet holds many nodes in one state: every empty node of an instance type, every full
one, nodes running the same replicas. The kernel (``pass.h``, "equal nodes") copies the
answer of the first row in a state to the others. Why ids kept where rows are written,
not a hash of each row per request: the hash read every slot and column of every row on
every request, which on a fleet of a few states was most of the pass (docs/BENCHMARKS.md,
"Node states as ids"); an id is one read. The inventory's columns intern a row's values
(``batch.row_of``) as they write it, and ``GpuBatch.from_views`` does the same for the
rows it builds.

A state's key is the whole row as ``row_of`` gives it, the GPU model included (the mix's
weights on a row are its model's), so equal ids mean equal inputs. Ids are reference
counted and reused once no row holds them: there are never more ids in use than rows,
which keeps every id below the number of rows (the kernel sizes its table by that).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

State = tuple[Hashable, ...]


def state_of(values: Sequence[object]) -> State:
    """The hashable key of one row's values (``batch.row_of``: its per-slot lists become
    tuples)."""
    return tuple(tuple(v) if isinstance(v, list) else v for v in values)


class RowStates:
    """Interns row states into ids in [0, rows holding one)."""

    def __init__(self) -> None:
        self._ids: dict[State, int] = {}
        self._keys: list[State | None] = []  # per id: its state; None while unused
        self._holders: list[int] = []  # per id: how many rows hold it
        self._unused: list[int] = []

    def acquire(self, state: State) -> int:
        """The id of ``state``, held once more (by the row just written in it)."""
        sid = self._ids.get(state)
        if sid is None:
            sid = self._unused.pop() if self._unused else len(self._keys)
            if sid == len(self._keys):
                self._keys.append(None)
                self._holders.append(0)
            self._ids[state] = sid
            self._keys[sid] = state
        self._holders[sid] += 1
        return sid

    def release(self, sid: int) -> None:
        """A row no longer holds ``sid`` (rewritten, or gone); the last one frees it."""
        self._holders[sid] -= 1
        if self._holders[sid] == 0:
            key = self._keys[sid]
            assert key is not None
            del self._ids[key]
            self._keys[sid] = None
            self._unused.append(sid)

    def __len__(self) -> int:
        """Ids in use: the distinct states the rows are in."""
        return len(self._ids)
