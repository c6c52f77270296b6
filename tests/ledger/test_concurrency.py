"""Concurrency: threads AND processes deciding the same pods on one ledger.

Every pod must be allocated exactly once; every other attempt gets AlreadyAllocated.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from extender.core.allocation import LedgerUnavailable
from extender.ledger import open_ledger
from extender.ledger.records import AllocationFilter
from extender.ledger.sql import SqlLedger
from extender.ledger.sqlite import SqliteDialect
from extender.wire.clock import ManualClock

from .contender import race
from .helpers import decision

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PODS, THREADS, PROCESSES = 80, 4, 3


def test_each_pod_is_allocated_exactly_once(ledger_target: str, clock: ManualClock) -> None:
    ledger = open_ledger(ledger_target, clock)  # schema exists before the race starts
    env = {**os.environ, "PYTHONPATH": ROOT}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.ledger.contender", ledger_target, str(PODS), str(seed)],
            cwd=ROOT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for seed in range(PROCESSES)
    ]
    outs: list[list[str]] = [[] for _ in range(THREADS)]
    threads = [
        threading.Thread(target=race, args=(ledger, PODS, 100 + k, outs[k])) for k in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = [line for out in outs for line in out]
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        lines += stdout.split("\n")
    try:
        wins = Counter(line.split()[1] for line in lines if line.startswith("won"))
        losses = Counter(line.split()[1] for line in lines if line.startswith("lost"))
        assert wins == Counter({f"c-{i}": 1 for i in range(PODS)})
        assert all(losses[f"c-{i}"] == THREADS + PROCESSES - 1 for i in range(PODS))
        rows = ledger.list_allocations(AllocationFilter(active=True), 0, 1000)
        assert Counter(a.pod.uid for a in rows) == Counter({f"c-{i}": 2 for i in range(PODS)})
        assert len(ledger.list_events(0, 1000)) == PODS
        assert ledger.verify_chain().ok
    finally:
        ledger.close()


def test_a_write_held_up_by_another_in_this_process_fails_in_time_and_writes_nothing(
    tmp_path: Path, clock: ManualClock
) -> None:
    """SQLite writes of one process take turns on one connection: a write that cannot
    have its turn within the busy timeout is refused as one that never began (nothing
    of it can have been written), and goes through once the turn is free."""
    dialect = SqliteDialect(str(tmp_path / "ledger.db"), busy_timeout_s=0.2)
    ledger = SqlLedger(dialect)
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with dialect.write():
            holding.set()
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        with pytest.raises(LedgerUnavailable, match="another write in this process") as refused:
            ledger.record_decision(decision("u1", at=clock.now()))
        assert not refused.value.maybe_written
    finally:
        done.set()
        holder.join()
    assert ledger.active() == []
    ledger.record_decision(decision("u1", at=clock.now()))
    assert [a.pod.uid for a in ledger.active()] == ["u1"]
    assert ledger.verify_chain().ok
    ledger.close()
