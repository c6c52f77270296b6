"""The benchmark commands docs/BENCHMARKS.md gives still run (at toy sizes) and print
their tables: a bench that fails is found here, not by the next person to measure."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NEEDS_PLANE = [  # the e2e control plane: binaries built (or cached) by tests/e2e/build.sh
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("go") is None or os.environ.get("HEADROOM_E2E") == "0",
        reason="needs Go for the e2e control plane (HEADROOM_E2E=0 skips it)",
    ),
]


@pytest.mark.parametrize(
    ("script", "args", "row"),
    [
        (
            "bench/latency.py",
            ["--sizes", "30", "--requests", "3", "--nodes-mode-requests", "2", "--slowest", "1"],
            "| 30 | NodeNames | shuffled | 3 |",
        ),
        (
            "bench/latency.py",
            ["--sizes", "30", "--requests", "2", "--nodes-mode-requests", "2", "--client", "lean"],
            "| 30 | Nodes | shuffled | 2 |",
        ),
        pytest.param(
            "bench/latency.py",
            ["--sizes", "30", "--requests", "2", "--nodes-mode-requests", "2", "--client", "go"],
            "| 30 | Nodes | shuffled | 2 |",
            marks=pytest.mark.skipif(shutil.which("go") is None, reason="needs Go"),
        ),
        ("bench/phases.py", ["--nodes", "30", "--pods", "3"], "| shuffled |"),
        (
            "bench/sections.py",
            ["--nodes", "30", "--pods", "3", "--shapes", "shuffled"],
            "| shuffled | filter | whole request | 4 |",
        ),  # 3 pods after a warm-up pod; one node passes each time, so no prioritize
        ("bench/names.py", ["--nodes", "30", "--reads", "3"], "| simulated (node-00042) |"),
        (
            "bench/kernelpass.py",
            ["--nodes", "2100", "--passes", "3", "--rounds", "1", "--pause-ms", "0"],
            "the four ways give the same bits: True",
        ),  # 2,100 nodes: over the 2,048 from which a pass is shared
        pytest.param(
            "bench/bindpost.py",
            ["--pods", "12", "--rounds", "1"],
            "| bare http.client (floor) |",
            marks=NEEDS_PLANE,
        ),  # the e2e control plane: binaries built (or cached) by tests/e2e/build.sh
        pytest.param(
            "bench/latency.py",
            [
                *("--sizes", "30", "--requests", "3", "--modes", "NodeNames"),
                *("--shapes", "cold", "--announce", "5"),
            ],
            "| 30 | NodeNames | cold | 3 |",
            marks=NEEDS_PLANE,
        ),  # each pod created in that control plane first
        pytest.param(
            "bench/ahead.py",
            ["--nodes", "30", "--pods", "3"],
            "| 1 | off | 3 / 0 |",
            marks=NEEDS_PLANE,
        ),  # the real kube-scheduler: the passes each setting made
        (
            "bench/coldstart.py",
            ["--runs", "1", "--nodes", "30", "--filters", "2", "--in-process"],
            "| first / later filters |",
        ),
    ],
)
def test_a_bench_command_prints_its_table(script: str, args: list[str], row: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert row in done.stdout, done.stdout
