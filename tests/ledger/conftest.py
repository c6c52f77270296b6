"""Fixtures: a real PostgreSQL server per session, and a ``ledger`` on each backend.

Every test that takes ``ledger`` (or ``ledger_target``) runs twice: on a SQLite file
in tmp and on a fresh database of the session's PostgreSQL server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from extender.ledger import open_ledger
from extender.ledger.base import Ledger
from extender.ledger.metrics import LedgerMetrics
from extender.wire.clock import ManualClock

from .pg import PgServer, binaries_missing


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    why = binaries_missing()
    if why:
        pytest.skip(why)
    server = PgServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "ledger.db")
        return
    server: PgServer = request.getfixturevalue("pg_server")
    dsn = server.create_db()
    yield dsn
    server.drop_db(dsn)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def metrics() -> LedgerMetrics:
    return LedgerMetrics(CollectorRegistry())


@pytest.fixture
def ledger(ledger_target: str, clock: ManualClock, metrics: LedgerMetrics) -> Iterator[Ledger]:
    led = open_ledger(ledger_target, clock, hooks=metrics)
    yield led
    led.close()
