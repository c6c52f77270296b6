"""bench/throughput.py (issue 29) stays runnable: its command parses, its trace pods map
to what both runs can bind, its spans still wrap the extender's names after a refactor
(a renamed method would otherwise only be found by the next person to measure), and a
toy run through the real control plane prints its table. No timing is asserted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.throughput import breakdown
from bench.throughput_cluster import MAX_GPUS_PER_POD, OPENB_PODS, pod_body, trace_pods

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout
    )


def test_the_command_parses() -> None:
    done = _run("-m", "bench.throughput", "--help")
    assert done.returncode == 0, done.stderr
    assert "--nodes" in done.stdout and "--pods" in done.stdout


@pytest.mark.skipif(not OPENB_PODS.exists(), reason="needs ../shared/data/openb")
def test_trace_pods_fit_a_node_and_ask_as_the_readme_says() -> None:
    pods = trace_pods(300, seed=3)
    assert pods == trace_pods(300, seed=3)  # one draw for both runs
    assert all(1 <= p.demand.count <= MAX_GPUS_PER_POD for p in pods)
    shares = [p for p in pods if p.demand.memory_mib is not None]
    assert shares and len(shares) < len(pods)  # mixed shapes
    body = pod_body("p", shares[0])
    res = body["spec"]["containers"][0]["resources"]
    assert res["limits"] == {"nvidia.com/gpu": "1"}
    assert body["metadata"]["annotations"]["headroom.dev/gpu-memory"].endswith("Mi")
    assert set(res["requests"]) == {"cpu", "memory"}
    whole = next(p for p in pods if p.demand.memory_mib is None)
    assert "headroom.dev/gpu-memory" not in pod_body("q", whole)["metadata"]["annotations"]


def test_breakdown_is_per_bound_pod_in_bind_path_order() -> None:
    spans = {"zzz other": [0.001], "service.bind": [0.010, 0.030], "http /bind": [0.040, 0.040]}
    rows = breakdown(spans, pods=2)
    assert [r[0] for r in rows] == ["http /bind", "service.bind", "zzz other"]
    _, calls, p50, _, per_pod = rows[1]
    assert (calls, round(p50, 3), round(per_pod, 3)) == (2, 20.0, 20.0)


def test_the_spans_still_wrap_the_extender() -> None:
    """install() patches names the extender must still have; it raises if one moved."""
    code = (
        "import bench.throughput_spans as s; s.install();"
        "from extender.kube.binder import KubeBinder;"
        "from extender.scheduling.service import SchedulingService as S;"
        "assert KubeBinder._bind.__wrapped__ and S.filter.__wrapped__; print('ok')"
    )
    done = _run("-c", code)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]


@pytest.mark.e2e
@pytest.mark.skipif(
    shutil.which("go") is None or os.environ.get("HEADROOM_E2E") == "0",
    reason="needs the Go toolchain for the control plane (HEADROOM_E2E=0 skips)",
)
def test_a_toy_run_binds_every_pod_in_both_runs() -> None:
    done = _run(
        "-m", "bench.throughput", "--nodes", "4", "--pods", "6", "--stall", "30", timeout=600
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    for row in (
        "| without | 6/6 |",
        "| with | 6/6 |",
        "ratio with ÷ without",
        "kube: Binding POST",
    ):
        assert row in done.stdout, done.stdout
