"""``headroom simulate`` end to end: a real extender, simulated agents over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extender.cli", "simulate", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )


def test_simulate_compares_policies_as_json_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "cmp.png"
    out = run(
        "--nodes",
        "8",
        "--pods",
        "60",
        "--policy",
        "binpack,fgd",
        "--seed",
        "3",
        "--json",
        "--plot",
        str(png),
    )
    results = json.loads(out.stdout)
    assert [r["policy"] for r in results] == ["binpack", "fgd"]
    for r in results:
        assert r["placed"] + r["unplaceable"] == 60
        assert r["placed"] > 0
        assert 0 < r["allocation_rate"] <= 1
        assert r["on_demand_pods_on_spot"] == 0
        assert r["usd_per_gib_hour"] > 0
        # the run's chargeback, from its own ledger: every cent of the bill is accounted for
        charged = sum(Decimal(v) for v in r["charges"].values())
        assert charged > 0
        assert charged + Decimal(r["idle_usd"]) == Decimal(r["gpu_bill_usd"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_table_and_kept_ledger(tmp_path: Path) -> None:
    db = tmp_path / "sim.db"
    out = run("--nodes", "6", "--pods", "30", "--policy", "spread", "--db", str(db))
    assert "policy" in out.stdout and "spread" in out.stdout and "$/GiB-h" in out.stdout
    assert "charges + idle = GPU bill, to the cent" in out.stdout
    assert db.exists() and db.stat().st_size > 0
