"""Durability: a killed writer or a crashed server loses no committed allocation and
leaves no half-written one (every pod has all its grants or none; every decision
event has its rows; the hash chain still verifies)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from extender.ledger import open_ledger
from extender.ledger.records import AllocationFilter
from extender.wire.clock import ManualClock

from .pg import PgServer
from .writer import GRANTS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _spawn(target: str, prefix: str, count: int, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.ledger.writer", target, prefix, str(count), *extra],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _read_until(proc: subprocess.Popen[str], n: int) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    while len(lines) < n:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"writer ended early: {proc.stderr.read() if proc.stderr else ''}")
        lines.append(line.split()[1])
    return lines


def _check_consistent(target: str, clock: ManualClock, committed: list[str]) -> set[str]:
    """All-or-nothing per pod, events match rows, chain intact; returns pods present."""
    ledger = open_ledger(target, clock)
    try:
        rows = []
        after = 0
        while page := ledger.list_allocations(AllocationFilter(), after, 1000):
            rows += page
            after = page[-1].id
        per_pod = Counter(a.pod.uid for a in rows)
        assert set(per_pod.values()) <= {GRANTS}, "a pod has only part of its grants"
        assert set(committed) <= set(per_pod), "a committed pod is missing"
        events, after = [], 0
        while page_e := ledger.list_events(after, 1000):
            events += page_e
            after = page_e[-1].seq
        decisions = Counter(e.pod_uid for e in events if e.kind == "decision")
        assert decisions == Counter(dict.fromkeys(per_pod, 1)), "decision events != pods"
        report = ledger.verify_chain()
        assert report.ok, report.reason
        return set(per_pod)
    finally:
        ledger.close()


def test_sigkill_mid_burst_sqlite(tmp_path: Path, clock: ManualClock) -> None:
    target = str(tmp_path / "ledger.db")
    open_ledger(target, clock).close()  # schema first, so the kill lands in the burst
    proc = _spawn(target, "k", 1_000_000)
    committed = _read_until(proc, 300)
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    committed += [line.split()[1] for line in out.splitlines() if line.startswith("committed")]
    present = _check_consistent(target, clock, committed)
    assert len(present) >= len(committed) >= 300


@pytest.mark.postgres
def test_postgres_restarted_mid_burst_writer_retries(
    pg_server: PgServer, clock: ManualClock
) -> None:
    target = pg_server.create_db()
    try:
        open_ledger(target, clock).close()
        proc = _spawn(target, "r", 1_000_000, "--retry")
        committed = _read_until(proc, 100)
        pg_server.restart_immediate()  # the writer is mid-burst: its connection dies
        committed += _read_until(proc, 100)  # ...and it recovers by retrying
        os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        committed += [line.split()[1] for line in out.splitlines() if line.startswith("commi")]
        assert "retry:" in err, "the restart never reached the writer"
        present = _check_consistent(target, clock, committed)
        assert set(committed) <= present
    finally:
        pg_server.drop_db(target)
