"""Fixtures for the agent tests: a real report server and a dead URL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from drivers_report_server import ReportServer, free_url, start_report_server


@pytest.fixture
def report_server() -> Iterator[ReportServer]:
    state, server = start_report_server()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def dead_url() -> str:
    return free_url()
