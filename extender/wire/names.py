"""Candidate node-name lists as the scheduling side sees them, whoever decoded them.

kube-scheduler sends the same candidates pod after pod, so the scheduling side keeps
what it worked out per list (a plan, its replies) and must know a list again cheaply.
A decoder may hand over a ``Candidates``: a read-only sequence of names that carries a
``key`` equal lists share, and can take the part of itself that passed a filter in a
form its encoder writes fast. A plain ``list[str]`` works everywhere too (slower: it
is hashed for its key). The HTTP edge's codec produces ``Candidates``; the scheduling
side only ever sees this type, never the codec.

``Priorities`` is prioritize's answer as data (names and integer scores): the edge
encodes it, so a reply written straight from the decoder's name bytes needs nothing
from the scheduling side but this.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Self, overload

import numpy as np
import numpy.typing as npt

from extender.wire.protocol import HostPriority

Positions = npt.NDArray[np.int64]


class Candidates(Sequence[str]):
    """A candidate list a decoder made: its names, or their ``ids`` with the ``pool``
    of strings they index (each string made only when asked for: of 5,000 candidates
    only the few that pass the filter are ever needed); ``key`` (equal lists share it;
    compare the lists too, keys of unequal ones may collide); ``token`` (ids of two
    lists with the same token name the same nodes alike); ``memo``, what the decoder
    keeps with the list (its bytes). The methods are plain data handling, here so that
    the scheduling side never calls into the decoder. Shared between requests: nothing
    may mutate one."""

    __slots__ = ("_names", "_pool", "ids", "key", "memo", "token")

    def __init__(
        self,
        names: Sequence[str],
        key: Hashable,
        ids: Positions | None = None,
        token: object = None,
        pool: npt.NDArray[Any] | None = None,
    ) -> None:
        self._names: list[str] | None = list(names) if pool is None else None
        self._pool = pool
        self.key, self.ids, self.token = key, ids, token
        self.memo: Any = None

    def __copy__(self) -> Self:
        """A shallow copy made slot by slot: ``copy.copy``'s own way (the pickle reduce
        protocol) is several times slower, and ``part`` copies once in every filter."""
        new = object.__new__(type(self))
        for name in _slots(type(self)):
            setattr(new, name, getattr(self, name))
        return new

    def as_list(self) -> list[str]:
        """Every name (made once; do not mutate it)."""
        if self._names is None:
            assert self._pool is not None and self.ids is not None
            self._names = self._pool[self.ids].tolist()
        return self._names

    def part(self, positions: Positions) -> Self:
        """The names at these positions (ascending) as a list of their own, with their
        ids, their strings made from the pool when asked for; unkeyed."""
        part = copy.copy(self)
        part.key, part.memo = None, None
        if self.ids is None:
            part._names, part._pool = [self[i] for i in positions.tolist()], None
            return part
        part.ids = self.ids[positions]
        part._names = None if self._pool is not None else _at(self.as_list(), positions)
        return part

    def keyed(self, key: Hashable) -> Self:
        """The same list under ``key`` (one list object per cache owner: none mutated)."""
        same = copy.copy(self)
        same.key = key
        return same

    def __len__(self) -> int:
        return len(self._names) if self._names is not None else len(self.ids)  # type: ignore[arg-type]

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if self._names is None and not isinstance(i, slice):
            return str(self._pool[self.ids[i]])  # type: ignore[index]
        return self.as_list()[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_list())

    def __eq__(self, other: object) -> bool:
        if (
            isinstance(other, Candidates)
            and self.ids is not None
            and other.ids is not None
            and self.token is other.token
        ):
            return bool(np.array_equal(self.ids, other.ids))  # ids are names, one to one
        if isinstance(other, Sequence) and not isinstance(other, str):
            return self.as_list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as a list's

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.as_list()!r})"


def _at(names: Sequence[str], positions: Positions) -> list[str]:
    return [names[i] for i in positions.tolist()]


@cache
def _slots(cls: type) -> tuple[str, ...]:
    """Every slot of ``cls`` and its bases (each is set in ``__init__``)."""
    return tuple(name for c in cls.__mro__ for name in getattr(c, "__slots__", ()))


def passing_names(names: Sequence[str], positions: Positions) -> Sequence[str]:
    """The filter's passing names: the list's own ``part`` when it is ``Candidates``
    (its encoder writes that fast and knows it again as prioritize's candidates)."""
    if isinstance(names, Candidates):
        return names.part(positions)
    return _at(names, positions)


def names_key(names: Sequence[str]) -> Hashable:
    """A key equal lists share (compare the lists too: keys of unequal ones may collide)."""
    key = getattr(names, "key", None)
    return key if key is not None else ("names", len(names), hash(tuple(names)))


def same_names(a: Sequence[str], b: Sequence[str]) -> bool:
    return a is b or a == b


def picked(names: Sequence[str], positions: list[int] | Positions) -> Sequence[str]:
    """The names at these positions, from any list, each made only when asked for."""
    at = positions.tolist() if isinstance(positions, np.ndarray) else positions
    return Picked(names, at)


class Picked(Sequence[str]):
    """Some names of a list, by position, each made only when asked for: a plan
    re-evaluates the nodes a round of reports changed by their rows, and names only the
    ones that do not fit (their reasons); the strings of the others are never needed."""

    __slots__ = ("_names", "_positions")

    def __init__(self, names: Sequence[str], positions: list[int]) -> None:
        self._names, self._positions = names, positions

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self._names[p] for p in self._positions[i]]
        return self._names[self._positions[i]]

    def __iter__(self) -> Iterator[str]:
        return (self._names[p] for p in self._positions)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as a list's

    def __repr__(self) -> str:
        return f"Picked({list(self)!r})"


@dataclass(frozen=True, eq=False)
class Priorities:
    """prioritize's answer: each candidate's integer score, in the candidates' order.
    Kept with a plan and handed out again for a repeat, so an encoder may keep the
    bytes it wrote for the very object."""

    names: Sequence[str]
    scores: npt.NDArray[Any]

    def host_priorities(self) -> list[HostPriority]:
        return list(map(HostPriority, self.names, self.scores.tolist()))
