"""Rows read by column name: the one row mapping both dialects use.

A record's constructor names the columns it reads: the parameters of a dataclass,
a ``NamedTuple`` or a plain function are looked up, by name, in the cursor's
``description`` (the DB-API column list that sqlite3 and psycopg both fill), once per
query. A statement that adds, drops or reorders a column therefore cannot shift a
value into the wrong field, and one that lacks a column fails on its first row
instead of billing the wrong number.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Generic, TypeVar

T = TypeVar("T")
Row = Sequence[Any]


@dataclass(frozen=True)
class Shape(Generic[T]):
    """How one kind of record is built from a row.

    ``make`` is called positionally with the values of its own parameters, each found
    by name; ``convert`` fixes what a driver returns in a form the record does not
    take (money as TEXT on SQLite, JSON text, enum values).
    """

    make: Callable[..., T]
    convert: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)

    @property
    def fields(self) -> tuple[str, ...]:
        return _parameters(self.make)

    @property
    def columns(self) -> str:
        """The select list: ``"a, b, c"``."""
        return ", ".join(self.fields)

    def reader(self, description: Sequence[Sequence[Any]]) -> Callable[[Row], T]:
        """A row -> record function for a result whose columns are ``description``."""
        names = [str(d[0]) for d in description]
        wanted = self.fields
        missing = [f for f in wanted if f not in names]
        if missing:
            raise LookupError(f"{self.make.__name__}: the query lacks {', '.join(missing)}")
        pick = itemgetter(*[names.index(f) for f in wanted])
        fixes = [(i, self.convert[f]) for i, f in enumerate(wanted) if f in self.convert]
        make = self.make
        if len(wanted) == 1:  # itemgetter of one index returns the value, not a 1-tuple
            return lambda row: make(pick(row))
        if not fixes:  # a month's chargeback reads a million rows: keep this path short
            return lambda row: make(*pick(row))

        def read(row: Row) -> T:
            values = list(pick(row))
            for i, fix in fixes:
                values[i] = fix(values[i])
            return make(*values)

        return read


@functools.cache
def _parameters(make: Callable[..., Any]) -> tuple[str, ...]:
    """Once per record type: ``inspect.signature`` on every query was a tenth of the
    ledger writer's time under ``headroom simulate`` (py-spy)."""
    return tuple(inspect.signature(make).parameters)


def fetch_all(cursor: Any, shape: Shape[T]) -> list[T]:
    read = shape.reader(cursor.description)
    return [read(r) for r in cursor.fetchall()]


def fetch_one(cursor: Any, shape: Shape[T]) -> T | None:
    row = cursor.fetchone()
    return None if row is None else shape.reader(cursor.description)(row)


def stream(cursor: Any, shape: Shape[T], batch: int) -> Iterator[T]:
    """Records in batches of ``batch`` rows: a month of allocations never sits in memory."""
    read = shape.reader(cursor.description)
    while rows := cursor.fetchmany(batch):
        yield from map(read, rows)
