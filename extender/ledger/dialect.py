"""What a database backend gives the ledger, and what the ledger tells metrics.

``SqlLedger`` is written once against ``Dialect``; SQLite and PostgreSQL differ only
in how they open, lock and translate errors (``sqlite.py``, ``postgres.py``). ``Hooks``
is the side channel for metrics, called after a commit, so the ledger needs no
metrics library and tests can pass ``NullHooks``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from decimal import Decimal
from typing import Any, Protocol

from extender.core.allocation import Observation


class UniqueConflict(Exception):
    """A unique index refused a row (translated by the dialect from the driver's error)."""


class Cursor(Protocol):
    rowcount: int
    description: Any

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def fetchmany(self, size: int = ...) -> list[Any]: ...


class Dialect(Protocol):
    """What differs between SQLite and PostgreSQL; everything else is shared."""

    name: str
    types: dict[str, str]

    def write(self) -> AbstractContextManager[Any]:
        """A connection inside a write transaction holding the ledger write lock."""
        ...

    def read(self) -> AbstractContextManager[Any]:
        """A connection for reads (errors translated to ``LedgerUnavailable``)."""
        ...

    def savepoint(self, conn: Any) -> AbstractContextManager[None]:
        """A savepoint inside ``write()``'s transaction. A failure inside rolls back to
        it and is raised again: a unique index's refusal as ``UniqueConflict``; any
        other database error as ``LedgerUnavailable`` (the whole transaction's failure:
        the savepoint's own rollback is not trusted then)."""
        ...

    def migrate(self) -> AbstractContextManager[Any]:
        """A write transaction serialised against other processes migrating."""
        ...

    def sql(self, statement: str) -> str: ...

    def money(self, value: Decimal | None) -> Any: ...

    def close(self) -> None: ...


def to_decimal(v: object) -> Decimal:
    """TEXT (SQLite) or NUMERIC (PostgreSQL) money back to an exact Decimal."""
    return v if isinstance(v, Decimal) else Decimal(str(v))


def to_price(v: object) -> Decimal | None:
    """A price column: NULL is an unknown price (never read as 0)."""
    return None if v is None else to_decimal(v)


class Hooks(Protocol):
    """Side channels for metrics; called after a successful commit."""

    def write_seconds(self, op: str, seconds: float) -> None: ...
    def discrepancy_opened(self, kind: str) -> None: ...
    def observed(self, observations: Sequence[Observation]) -> None: ...


class NullHooks:
    def write_seconds(self, op: str, seconds: float) -> None:
        pass

    def discrepancy_opened(self, kind: str) -> None:
        pass

    def observed(self, observations: Sequence[Observation]) -> None:
        pass
