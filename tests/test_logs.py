"""Structured logs: one JSON object a line on stderr, credentials redacted, and written to
stderr as it is when the record is written (``extender.wire.logs.setup_logging``, which
every headroom process calls at start)."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from extender.wire.logs import setup_logging

log = logging.getLogger("headroom.test.logs")


@pytest.fixture(autouse=True)
def root_logger_restored() -> Iterator[None]:
    """setup_logging replaces the root logger's handlers: the test's own are put back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def last_record(stream: io.StringIO) -> dict[str, object]:
    lines = stream.getvalue().splitlines()
    assert lines, "nothing was written"
    record: dict[str, object] = json.loads(lines[-1])
    return record


def test_a_record_is_one_json_line_with_its_fields_and_no_credential(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    setup_logging("info")
    log.info(
        "report refused",
        extra={"node": "gpu-1", "agent_token": "tok-123", "Authorization": "Bearer abc"},
    )
    record = last_record(out)
    assert record["msg"] == "report refused"
    assert record["level"] == "info"
    assert record["node"] == "gpu-1"
    assert record["agent_token"] == record["Authorization"] == "[redacted]"
    assert "tok-123" not in out.getvalue() and "Bearer abc" not in out.getvalue()


def test_records_go_to_stderr_as_it_is_when_they_are_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CLI run in-process (the tests call ``main()``) sets logging up under a captured
    stderr that is closed later; a record from a thread that outlives it must still be
    written, to the stderr of the moment, not fail with "I/O operation on closed file"."""
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    setup_logging("info")
    log.info("while the first stderr was open")
    assert last_record(first)["msg"] == "while the first stderr was open"
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    log.warning("claim not ingested yet", extra={"claim": "ns/share-c-gpu"})
    assert "Logging error" not in second.getvalue()
    record = last_record(second)
    assert record["msg"] == "claim not ingested yet"
    assert record["claim"] == "ns/share-c-gpu"
