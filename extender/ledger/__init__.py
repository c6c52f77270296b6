"""The allocation ledger: the product's record of truth for who got which GPU memory.

``open_ledger(target, clock)`` picks the backend: a ``postgresql://`` or
``postgres://`` DSN opens PostgreSQL, anything else is a SQLite file path.
"""

from __future__ import annotations

from extender.ledger.base import Ledger
from extender.ledger.chargeback import ChargebackReport, compute
from extender.ledger.sql import Hooks, SqlLedger
from extender.wire.clock import Clock

__all__ = ["Ledger", "SqlLedger", "chargeback_report", "is_dsn", "open_ledger"]


def is_dsn(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def open_ledger(
    target: str, clock: Clock, hooks: Hooks | None = None, timeout_s: float = 3.0
) -> Ledger:
    """Open (and migrate) the ledger at ``target``; raises ``LedgerUnavailable``.

    ``hooks`` default to the process metrics (``extender.ledger.metrics.METRICS``).
    ``timeout_s`` bounds each wait on the database (connect, statement, lock, SQLite's
    busy wait): a bind must answer before kube-scheduler's 5 s extender timeout.
    """
    del clock  # writes carry their own timestamps; kept for the stable signature
    if hooks is None:
        from extender.ledger.metrics import METRICS

        hooks = METRICS
    if is_dsn(target):
        from extender.ledger.postgres import PostgresDialect  # psycopg only when used

        return SqlLedger(PostgresDialect(target, timeout_s=timeout_s), hooks)
    from extender.ledger.sqlite import SqliteDialect

    return SqlLedger(SqliteDialect(target, busy_timeout_s=timeout_s), hooks)


def chargeback_report(
    ledger: Ledger, start: float, end: float, group_by: str, now: float
) -> ChargebackReport:
    """Read the window's rows and node periods, then price them (pure ``compute``)."""
    return compute(
        ledger.charge_rows(start, end), ledger.node_periods(start, end), start, end, now, group_by
    )
