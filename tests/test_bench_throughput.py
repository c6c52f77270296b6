"""bench/throughput.py (issue 29) stays runnable: its command parses, its trace pods map
to what both runs can bind, its spans still wrap the extender's names after a refactor
(a renamed method would otherwise only be found by the next person to measure), and a
toy run through the real control plane prints its table. No timing is asserted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.throughput import breakdown
from bench.throughput_cluster import (
    MAX_GPUS_PER_POD,
    OPENB_PODS,
    parse_cpus,
    pin,
    pod_body,
    trace_pods,
)
from bench.throughput_pprof import secure_port
from tests.e2e.cluster import Proc

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
    spans = {
        "zzz other": [0.001],
        "service.bind": [0.010, 0.030],
        "service.bind [CPU]": [0.002, 0.004],
        "http /bind": [0.040, 0.040],
    }
    rows = breakdown(spans, pods=2)
    assert [r[0] for r in rows] == ["http /bind", "service.bind", "zzz other"]
    _, calls, p50, _, per_pod, cpu = rows[1]
    assert (calls, round(p50, 3), round(per_pod, 3), round(cpu or 0, 3)) == (2, 20.0, 20.0, 3.0)
    assert rows[0][5] is None  # no CPU recorded for it


def test_cpu_lists_read_as_taskset_reads_them() -> None:
    assert parse_cpus("0") == {0}
    if (os.cpu_count() or 1) >= 2:
        assert parse_cpus("0,1") == parse_cpus("0-1") == {0, 1}
    with pytest.raises(ValueError, match="this machine has"):
        parse_cpus(str(os.cpu_count()))


def test_pin_moves_every_thread_of_a_running_process() -> None:
    """What --pin-plane/--pin-extender rely on: a process already running, threads and
    all, ends up allowed on the given CPUs only (as the kernel reports it)."""
    code = "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start();"
    code += "time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        tasks = Path(f"/proc/{proc.pid}/task")
        while len(list(tasks.iterdir())) < 2:  # the second thread has started
            time.sleep(0.01)
        pin(proc.pid, {0})
        for task in tasks.iterdir():
            assert os.sched_getaffinity(int(task.name)) == {0}
        pin(proc.pid, None)  # no set: left where it is
        assert os.sched_getaffinity(proc.pid) == {0}
    finally:
        proc.kill()
        proc.wait()


def test_profiles_are_fetched_from_the_secure_port_the_process_was_given() -> None:
    proc = Proc(
        "kube-scheduler-with", ["kube-scheduler", "--config=x", "--secure-port=40123"], Path("l")
    )
    assert secure_port(proc) == 40123
    with pytest.raises(ValueError, match="no --secure-port"):
        secure_port(Proc("etcd", ["etcd"], Path("l")))


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
def test_a_toy_run_binds_every_pod_in_both_runs(tmp_path: Path) -> None:
    """Pinned (where there are two CPUs) and profiled: both options run end to end."""
    pinned = ["--pin-plane", "0", "--pin-extender", "1"] if (os.cpu_count() or 1) >= 2 else []
    done = _run(
        "-m", "bench.throughput", "--nodes", "4", "--pods", "6", "--stall", "30",
        "--pprof", str(tmp_path), *pinned, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    if pinned:
        assert "Pinned: etcd, kube-apiserver, kube-scheduler and the bench on CPUs 0" in done.stdout
    for run in ("without", "with"):
        for proc in ("apiserver", "scheduler"):
            profile = tmp_path / f"{run}-{proc}.pprof"
            assert profile.exists() and profile.stat().st_size > 0, done.stdout[-2000:]
    for row in (
        "| without | 6/6 |",
        "| with | 6/6 |",
        "ratio with ÷ without",
        "kube: Binding POST",
    ):
        assert row in done.stdout, done.stdout
