"""Fixtures for the fault tests: a PostgreSQL server of their own (it gets stopped)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ledger.pg import PgServer, binaries_missing


class StoppablePg:
    """A PgServer a test may stop and start again (same data folder and port)."""

    def __init__(self, server: PgServer) -> None:
        self.server = server

    def stop(self) -> None:
        # pg_ctl through the harness's own runner (runs as 'postgres' when root)
        self.server._pg_ctl("stop", "-m", "fast")

    def start(self) -> None:
        self.server._pg_ctl("start")


@pytest.fixture
def stoppable_pg() -> Iterator[StoppablePg]:
    why = binaries_missing()
    if why:
        pytest.skip(why)
    server = PgServer().start()
    yield StoppablePg(server)
    server.stop()
