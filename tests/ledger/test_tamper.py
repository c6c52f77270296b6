"""Every column chargeback reads is covered by the hash chain: an edit of any billed column
of ``allocations`` or ``node_periods``, a deleted row or a row slipped in by hand makes
``ledger verify`` fail naming the row (and the column), on a SQLite file and on
PostgreSQL. The edits are raw SQL, as someone with database access would make them."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import psycopg
import pytest

import extender.ledger.migrate as ledger_migrate
from extender.ledger import open_ledger
from extender.ledger.schema import MIGRATIONS
from extender.wire.clock import ManualClock

from .helpers import GIB, NODE, decision, grant

GPUS = [("GPU-0", "H100", 80 * GIB), ("GPU-1", "H100", 80 * GIB)]


def fill(target: str) -> None:
    """A small month: a priced node, and allocations in every state."""
    clock = ManualClock()
    t = clock.now()
    ledger = open_ledger(target, clock)
    try:
        ledger.record_node(NODE, GPUS, Decimal("4.00"), t)
        labels = {"team": "vision"}
        for uid in ("a", "b", "c", "d"):
            d = decision(uid, grant("GPU-0", 10 * GIB), at=t, ns="training", labels=labels)
            ledger.record_decision(d)
        ledger.mark_bound("a", t + 1)
        ledger.mark_started("a", t + 2)
        ledger.mark_bound("b", t + 1)
        ledger.release("b", t + 3600, "completed")
        ledger.fail_bind("c", t + 1, "binding refused")
        ledger.record_node(NODE, GPUS, Decimal("5.00"), t + 7200)  # a second period
    finally:
        ledger.close()


@contextmanager
def raw(target: str) -> Iterator[Any]:
    """A plain database connection, outside headroom: the tamperer's."""
    if target.startswith("postgresql://"):
        with psycopg.connect(target, autocommit=True) as conn:
            yield conn
    else:
        lite = sqlite3.connect(target)
        try:
            yield lite
            lite.commit()
        finally:
            lite.close()


def sql(target: str, statement: str) -> None:
    with raw(target) as conn:
        conn.execute(statement)


def verify(target: str) -> tuple[bool, str]:
    ledger = open_ledger(target, ManualClock())
    try:
        report = ledger.verify_chain()
        return report.ok, report.reason
    finally:
        ledger.close()


# (column, new value as SQL) for the allocation of pod "a" (id 1)
EDITS = [
    ("price_per_hour", "'0'"),
    ("memory_mib", "1024"),
    ("gpu_total_mib", "1"),
    ("namespace", "'finance'"),
    ("labels", '\'{"team":"other"}\''),
    ("pod_uid", "'z'"),
    ("pod_name", "'renamed'"),
    ("node", "'node-z'"),
    ("instance_type", "'g4dn.xlarge'"),
    ("capacity_type", "'spot'"),
    ("gpu_uuid", "'GPU-1'"),
    ("sharing", "'exclusive'"),
    ("decided_at", "decided_at + 3600"),
    ("bound_at", "bound_at + 60"),
    ("started_at", "started_at + 60"),
    ("ended_at", "decided_at + 60"),
    ("status", "'ended'"),
    ("end_reason", "'evicted'"),
]


def test_an_untouched_ledger_verifies(ledger_target: str) -> None:
    fill(ledger_target)
    assert verify(ledger_target) == (True, "")


@pytest.mark.parametrize(("column", "value"), EDITS, ids=[c for c, _ in EDITS])
def test_each_billed_column_edited_is_named(ledger_target: str, column: str, value: str) -> None:
    fill(ledger_target)
    sql(ledger_target, f"UPDATE allocations SET {column} = {value} WHERE id = 1")
    ok, reason = verify(ledger_target)
    assert not ok
    assert reason.startswith("allocation 1:") and column in reason, reason


def test_a_deleted_or_forged_row_is_named(ledger_target: str) -> None:
    fill(ledger_target)
    sql(ledger_target, "DELETE FROM allocations WHERE id = 2")
    assert verify(ledger_target) == (False, "allocation 2 was deleted")
    sql(
        ledger_target,
        "INSERT INTO allocations (pod_uid, namespace, pod_name, node, gpu_uuid, gpu_index,"
        " memory_mib, gpu_total_mib, sharing, price_per_hour, status, decided_at)"
        " SELECT pod_uid, namespace, pod_name, node, gpu_uuid, gpu_index, memory_mib,"
        " gpu_total_mib, sharing, price_per_hour, 'ended', decided_at FROM allocations"
        " WHERE id = 1",
    )
    ok, reason = verify(ledger_target)
    assert not ok and "not in the trail" in reason


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        ("UPDATE node_periods SET gpu_price_per_hour = '0' WHERE id = 1", "gpu_price_per_hour"),
        ("UPDATE node_periods SET gpu_count = 1 WHERE id = 1", "gpu_count"),
        ("UPDATE node_periods SET until = NULL WHERE id = 1", "until"),
        ("UPDATE node_periods SET since = since - 86400 WHERE id = 2", "since"),
        ("DELETE FROM node_periods WHERE id = 2", "deleted"),
    ],
)
def test_node_price_periods_are_covered(ledger_target: str, edit: str, named: str) -> None:
    fill(ledger_target)
    sql(ledger_target, edit)
    ok, reason = verify(ledger_target)
    assert not ok and reason.startswith("node period") and named in reason, reason


def test_the_cli_fails_with_one_line_naming_the_row(ledger_target: str) -> None:
    fill(ledger_target)
    sql(ledger_target, "UPDATE allocations SET price_per_hour = '0' WHERE namespace = 'training'")
    proc = subprocess.run(
        [sys.executable, "-m", "extender.cli", "ledger", "verify", "--db", ledger_target],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("FAILED: allocation 1: price_per_hour was edited"), line


def test_periods_written_before_migration_3_are_attested(
    ledger_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        m.setattr(ledger_migrate, "MIGRATIONS", MIGRATIONS[:2])  # before periods were chained
        fill(ledger_target)
    assert verify(ledger_target) == (True, "")  # migration 3 attested both periods
    sql(ledger_target, "UPDATE node_periods SET gpu_price_per_hour = '0' WHERE id = 1")
    ok, reason = verify(ledger_target)
    assert not ok and reason == "node period 1: gpu_price_per_hour was edited"
