"""``headroom ledger verify`` (run as a subprocess) catches edited and deleted events."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from extender.ledger import is_dsn, open_ledger
from extender.wire.clock import ManualClock

from .helpers import decision

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PSQL = "/usr/lib/postgresql/15/bin/psql"


def _verify(target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extender.cli", "ledger", "verify", "--db", target],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _tamper(target: str, sql: str) -> None:
    """Change the database behind the ledger's back, as a person with a SQL shell would."""
    if not is_dsn(target):
        with sqlite3.connect(target) as conn:
            conn.execute(sql)
        return
    if os.path.exists(PSQL):
        subprocess.run(
            [PSQL, target, "-v", "ON_ERROR_STOP=1", "-c", sql], check=True, capture_output=True
        )
        return
    with psycopg.connect(target, autocommit=True) as pg:
        pg.execute(sql.encode())


@pytest.fixture
def filled(ledger_target: str, clock: ManualClock) -> str:
    ledger = open_ledger(ledger_target, clock)
    t = clock.now()
    for i in range(4):
        ledger.record_decision(decision(f"u{i}", at=t + i))
        ledger.mark_bound(f"u{i}", t + i + 0.5)
    ledger.close()
    return ledger_target


def test_untouched_ledger_verifies(filled: str) -> None:
    res = _verify(filled)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok: 8 events verified"


@pytest.mark.parametrize(
    "sql, bad_seq",
    [
        ("UPDATE events SET payload = replace(payload, 'cheapest', 'free') WHERE seq = 3", 3),
        ("UPDATE events SET at = at + 1 WHERE seq = 5", 5),
        ("DELETE FROM events WHERE seq = 4", 4),
        ("DELETE FROM events WHERE seq = 8", 8),
    ],
)
def test_edited_or_deleted_event_fails(filled: str, sql: str, bad_seq: int) -> None:
    _tamper(filled, sql)
    res = _verify(filled)
    assert res.returncode == 1
    assert f"FAILED at event {bad_seq}:" in res.stderr


def test_missing_ledger_is_an_error_not_a_pass(tmp_path: Path) -> None:
    res = _verify(str(tmp_path / "nope.db"))
    assert res.returncode == 2 and "no ledger" in res.stderr
