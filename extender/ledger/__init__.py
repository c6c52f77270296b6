"""The allocation ledger: the product's record of truth for who got which GPU memory.

``open_ledger(target, clock)`` picks the backend: a ``postgresql://`` or
``postgres://`` DSN opens PostgreSQL, anything else is a SQLite file path.

The package imports downward only: this front door wires the process metrics in as
the default hooks; ``metrics`` reads the ledger through its submodules, never
through this one.
"""

from __future__ import annotations

from extender.ledger.base import Ledger
from extender.ledger.chargeback import chargeback_report
from extender.ledger.dialect import Hooks
from extender.ledger.group import RIDE_GRACE_S
from extender.ledger.metrics import METRICS
from extender.ledger.sql import SqlLedger
from extender.wire.clock import Clock

__all__ = ["Ledger", "SqlLedger", "chargeback_report", "is_dsn", "open_ledger"]


def is_dsn(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def open_ledger(
    target: str,
    clock: Clock,
    hooks: Hooks | None = None,
    timeout_s: float = 3.0,
    ride_s: float = RIDE_GRACE_S,
) -> Ledger:
    """Open (and migrate) the ledger at ``target``; raises ``LedgerUnavailable``.

    ``hooks`` default to the process metrics (``extender.ledger.metrics.METRICS``).
    ``timeout_s`` bounds each wait on the database (connect, statement, lock, SQLite's
    busy wait): a bind must answer before kube-scheduler's 5 s extender timeout.
    ``ride_s``: how long a ``mark_bound_later`` waits for a transaction to ride in.
    """
    del clock  # writes carry their own timestamps; kept for the stable signature
    hooks = METRICS if hooks is None else hooks
    if is_dsn(target):
        from extender.ledger.postgres import PostgresDialect  # psycopg only when used

        return SqlLedger(PostgresDialect(target, timeout_s=timeout_s), hooks, ride_s=ride_s)
    from extender.ledger.sqlite import SqliteDialect

    return SqlLedger(SqliteDialect(target, busy_timeout_s=timeout_s), hooks, ride_s=ride_s)
