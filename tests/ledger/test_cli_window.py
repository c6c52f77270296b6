"""``--from``/``--to`` on the ledger CLI: a date, a time with its zone, or Unix seconds,
all meaning the same instant; anything else is one line that says what to type."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from extender.ledger import open_ledger
from extender.ledger.window import parse_timestamp
from extender.wire.clock import ManualClock

from .helpers import GIB, NODE, decision, grant

ROOT = Path(__file__).resolve().parents[2]
JAN_1 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
FEB_1 = 1_769_904_000.0  # 2026-02-01T00:00:00Z


def _ledger(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extender.cli", "ledger", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "value, expected",
    [
        ("2026-01-01", JAN_1),  # a date is its UTC midnight
        ("2026-02-01", FEB_1),
        ("2026-01-01T00:00:00Z", JAN_1),
        ("2026-01-01T01:00:00+01:00", JAN_1),
        ("1767225600", JAN_1),
        ("1767225600.5", JAN_1 + 0.5),
    ],
)
def test_the_forms_people_type_name_one_instant(value: str, expected: float) -> None:
    assert parse_timestamp(value) == expected


@pytest.mark.parametrize("value", ["yesterday", "2026-01-01T00:00:00", "2026-13-01", "", "-5"])
def test_other_values_are_refused_saying_what_to_type(value: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_timestamp(value)
    assert "2026-01-01" in str(e.value) or "out of range" in str(e.value)


def test_chargeback_window_by_date_on_the_command_line(tmp_path: Path) -> None:
    db = str(tmp_path / "l.db")
    led = open_ledger(db, ManualClock())
    t = JAN_1 + 14 * 86400  # 2026-01-15: inside January only
    led.record_node(NODE, [("GPU-0", "H100", 80 * GIB)], Decimal("4.00"), t)
    led.record_decision(decision("u1", grant("GPU-0", 40 * GIB), at=t, ns="ml"))
    led.release("u1", t + 3600, "done")
    led.close()

    def costs(*window: str) -> list[str]:
        res = _ledger(["export", "--db", db, "--format", "json", *window])
        assert res.returncode == 0, res.stderr
        return [row["cost_usd"] for row in json.loads(res.stdout)]

    # one hour of half an H100 at $4/h, whichever way January is written
    assert costs("--from", "2026-01-01", "--to", "2026-02-01") == ["2.00"]
    assert costs("--from", str(int(JAN_1)), "--to", "2026-02-01T00:00:00Z") == ["2.00"]
    assert costs("--from", "2026-02-01", "--to", "2026-03-01") == []

    bad = _ledger(["chargeback", "--db", db, "--from", "2026-01-01T00:00"])
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    assert "--from" in bad.stderr and "2026-01-01T08:00:00Z" in bad.stderr
