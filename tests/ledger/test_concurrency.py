"""Concurrency: threads AND processes deciding the same pods on one ledger.

Every pod must be allocated exactly once; every other attempt gets AlreadyAllocated.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter

from extender.ledger import open_ledger
from extender.ledger.records import AllocationFilter
from extender.wire.clock import ManualClock

from .contender import race

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
