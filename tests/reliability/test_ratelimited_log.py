"""The one rate-limited log helper (extender/wire/logs.py): one record per message per
window, the next carrying how many were dropped; and its filter form for asyncio."""

from __future__ import annotations

import logging

import pytest

from extender.wire.logs import RateLimitedLog


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_one_record_per_window_with_the_dropped_count(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    limited = RateLimitedLog(logging.getLogger("t.ledger"), every_s=10.0, now=clock)
    with caplog.at_level(logging.INFO, logger="t.ledger"):
        for _ in range(1000):  # an outage: one per refused bind
            limited.error("ledger write failed", extra={"pod": "u"})
        limited.warning("another message")  # its own window
        clock.t += 10.0
        assert limited.error("ledger write failed", extra={"pod": "v"}) is True
    records = [(r.getMessage(), getattr(r, "suppressed", 0)) for r in caplog.records]
    assert records == [
        ("ledger write failed", 0),
        ("another message", 0),
        ("ledger write failed", 999),
    ]


def test_filter_form_for_a_logger_that_is_not_ours(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    noisy = logging.getLogger("t.asyncio")
    f = RateLimitedLog(noisy, every_s=10.0, now=clock).filter("socket.accept() out of")
    noisy.addFilter(f)
    try:
        with caplog.at_level(logging.INFO, logger="t.asyncio"):
            for fd in range(500):
                noisy.error("socket.accept() out of system resource\nsocket: fd=%d", fd)
            noisy.error("something else")
        assert [r.getMessage().split("\n")[0] for r in caplog.records] == [
            "socket.accept() out of system resource",
            "something else",
        ]
    finally:
        noisy.removeFilter(f)
