"""Structured (JSON lines) logging for every headroom process.

Fields passed with ``extra=`` become JSON keys. Anything that looks like a credential
(keys containing token/secret/password/authorization) is redacted before it is written.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_SECRET_WORDS = ("token", "secret", "password", "authorization", "dsn")


def _redact(key: str, value: object) -> object:
    return "[redacted]" if any(w in key.lower() for w in _SECRET_WORDS) else value


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        extra = {k: v for k, v in vars(record).items() if k not in _STANDARD and k[0] != "_"}
        fields = extra.pop("fields", None)  # extra={"fields": {...}} is accepted too
        if isinstance(fields, dict):
            extra.update(fields)
        for key, value in extra.items():
            out[key] = _redact(key, value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _Stderr(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is when a record is written, not as it was at setup.
    A process's stderr does not change, but a CLI run in-process (the tests call
    ``main()``) sets up logging under one test's captured stderr, which is closed when
    that test ends: every later record, from a watch thread of another test, failed with
    "I/O operation on closed file" and a traceback in CI's output."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _: object) -> None:
        """StreamHandler's own assignments are ignored: the stream is read per record."""


def setup_logging(level: str | int = "info") -> None:
    handler = _Stderr()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # one line per HTTP request from the clients would drown everything else
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)


class RateLimitedLog:
    """At most one record per ``every_s`` seconds per message, for errors that repeat once
    per request while something outside is broken (a PostgreSQL outage: one ERROR per
    refused bind; a full file table: asyncio logged 110,687 accept errors in 10 s). The
    first record of a window is written at once; the ones in the rest of the window are
    counted and the next record written carries ``suppressed`` (how many were dropped).

    ``log.error(msg, extra=...)`` and friends, or ``filter()``: a ``logging.Filter`` for a
    logger that is not ours (asyncio), keyed by the record's message template. Thread
    safe (binds log from the thread pool)."""

    def __init__(
        self,
        logger: logging.Logger,
        every_s: float = 10.0,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger, self.every_s, self._now = logger, every_s, now
        self._windows: dict[str, tuple[float, int]] = {}  # message -> (window start, dropped)
        self._lock = threading.Lock()

    def admit(self, key: str) -> int | None:
        """None: drop this one (counted). Else the number dropped since the last one."""
        now = self._now()
        with self._lock:
            start, dropped = self._windows.get(key, (-1e18, 0))
            if now - start < self.every_s:
                self._windows[key] = (start, dropped + 1)
                return None
            if len(self._windows) > 1024:  # unbounded keys (templated messages): start over
                self._windows.clear()
            self._windows[key] = (now, 0)
            return dropped

    def log(
        self, level: int, msg: str, *, extra: dict[str, object] | None = None, key: str = ""
    ) -> bool:
        """Write ``msg`` unless one with the same ``key`` (default: ``msg``) was written in
        the last ``every_s`` seconds; True when written."""
        dropped = self.admit(key or msg)
        if dropped is None:
            return False
        fields = dict(extra or {})
        if dropped:
            fields["suppressed"] = dropped
        self.logger.log(level, msg, extra=fields, stacklevel=3)
        return True

    def error(self, msg: str, *, extra: dict[str, object] | None = None, key: str = "") -> bool:
        return self.log(logging.ERROR, msg, extra=extra, key=key)

    def warning(self, msg: str, *, extra: dict[str, object] | None = None, key: str = "") -> bool:
        return self.log(logging.WARNING, msg, extra=extra, key=key)

    def filter(self, prefix: str = "") -> logging.Filter:
        """A filter that rate-limits records whose message template starts with
        ``prefix`` (all records when empty); others pass untouched."""
        limiter = self

        class _Limit(logging.Filter):
            def filter(self, record: logging.LogRecord) -> bool:
                template = str(record.msg)
                if not template.startswith(prefix):
                    return True
                dropped = limiter.admit(prefix or template)
                if dropped:
                    record.suppressed = dropped
                return dropped is not None

        return _Limit()
