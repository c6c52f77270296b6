"""Report windows: the timestamps people type, and the month a report defaults to.

Shared by the audit API, the CLI and the chargeback gauge, so ``--from`` on the
command line, ``?from=`` over HTTP and the metric all read time the same way.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z


DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def parse_timestamp(value: str) -> float:
    """RFC3339 (offset or Z required), a date (``2026-01-01``: its UTC midnight, what a
    billing month starts at) or Unix seconds between 1970 and 9999 (what dates can
    show); ``ValueError`` otherwise, quoting at most 40 characters of the input. A
    timestamp without a zone stays refused: which midnight it meant is a guess."""
    try:
        t = float(value)
    except ValueError:
        t = math.nan
    if math.isfinite(t):
        if not 0 <= t <= LAST_SECOND:
            raise ValueError(f"unix seconds out of range (0..{LAST_SECOND}): {value[:40]!r}")
        return t
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        dt = None
    if dt is not None and DATE.fullmatch(value):
        dt = datetime(dt.year, dt.month, dt.day, tzinfo=UTC)
    elif dt is None or dt.tzinfo is None or "T" not in value.upper():
        raise ValueError(
            f"not RFC3339 or unix seconds: {value[:40]!r}; give a date (2026-01-01), "
            "a time with its zone (2026-01-01T08:00:00Z) or unix seconds"
        )
    return min(max(dt.timestamp(), 0.0), float(LAST_SECOND))


def month_start(t: float) -> float:
    """The start of ``t``'s calendar month, UTC."""
    d = datetime.fromtimestamp(t, UTC)
    return datetime(d.year, d.month, 1, tzinfo=UTC).timestamp()
