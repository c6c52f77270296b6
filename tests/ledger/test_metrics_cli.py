"""Metrics exposition over a real ledger, and the chargeback/export CLI output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

from extender.core.allocation import EventKind, Observation
from extender.ledger import open_ledger
from extender.ledger.base import Ledger
from extender.ledger.metrics import LedgerCollector, LedgerMetrics, metrics_response
from extender.wire.clock import ManualClock

from .helpers import GIB, NODE, decision, grant

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_metrics_exposition(ledger: Ledger, clock: ManualClock, metrics: LedgerMetrics) -> None:
    t = clock.now()
    ledger.record_node(NODE, [("GPU-0", "H100", 80 * GIB)], Decimal("4.00"), t)
    ledger.record_decision(decision("u1", grant("GPU-0", 20 * GIB), at=t, ns="ml"))
    ledger.observe([Observation("u1", "GPU-0", 1000, 5.0)], t + 5)
    ledger.record_discrepancy(EventKind.UNACCOUNTED, NODE.name, "GPU-0", "", 64, "", t + 5)
    clock.set(t + 3600)
    metrics.registry.register(LedgerCollector(lambda: ledger, clock, metrics))
    body, ctype = metrics_response(metrics.registry)
    text = body.decode()
    assert ctype.startswith("text/plain")
    assert (
        f'headroom_gpu_memory_granted_bytes{{gpu="GPU-0",namespace="ml",node="{NODE.name}"}}'
        " 2.147483648e+10"
    ) in text
    assert (
        'headroom_gpu_memory_used_bytes{gpu="GPU-0",namespace="ml",pod="pod-u1"} 1.048576e+09'
        in text
    )
    assert 'headroom_allocations_active{status="reserved"} 1.0' in text
    assert 'headroom_chargeback_dollars{namespace="ml"} 1.0' in text
    assert 'headroom_discrepancies_total{kind="unaccounted"} 1.0' in text
    assert 'headroom_ledger_write_seconds_count{op="record_decision"} 1.0' in text


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extender.cli", "ledger", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_chargeback_table_and_export(tmp_path: Path, clock: ManualClock) -> None:
    db = str(tmp_path / "l.db")
    led = open_ledger(db, clock)
    t = clock.now()
    led.record_node(NODE, [("GPU-0", "H100", 80 * GIB)], Decimal("4.00"), t)
    led.record_decision(decision("u1", grant("GPU-0", 40 * GIB), at=t, ns="ml"))
    led.release("u1", t + 3600, "done")
    led.close()
    window = ("--from", "2026-01-01T00:00:00Z", "--to", str(t + 7200))
    res = _cli("chargeback", "--db", db, *window, "--group-by", "pod")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == [
        "POD",
        "ALLOCS",
        "GIB-HOURS",
        "COST",
        "USD",
        "MEAN",
        "USED",
        "MIB",
        "MEAN",
        "SM",
        "%",
    ]
    assert lines[1].split()[:4] == ["ml/pod-u1", "1", "40.0000", "2.00"]
    node_line = next(line for line in lines if line.startswith(NODE.name))
    assert node_line.split()[3:6] == ["8.00", "2.00", "6.00"]
    exported = json.loads(_cli("export", "--db", db, *window, "--format", "json").stdout)
    assert [(r["pod_uid"], r["cost_usd"]) for r in exported] == [("u1", "2.00")]
    grouped = _cli("export", "--db", db, *window, "--group-by", "namespace").stdout
    assert grouped.splitlines()[1].startswith("ml,1,40.0000,2.00")
    bad = _cli("chargeback", "--db", db, "--from", "yesterday")
    assert bad.returncode == 2 and "not RFC3339 or unix seconds" in bad.stderr
