"""``headroom agent`` from the command line: --once, errors, and a real loop process."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pynvml
import pytest
from drivers_report_server import ReportServer
from prometheus_client import CollectorRegistry

from drivers.agent.cli import add_agent_command, main
from drivers.agent.loop import Agent
from drivers.agent.metrics import AgentMetrics
from drivers.agent.server import MetricsServer
from drivers.gpu.simulated import SimulatedDriver
from extender.wire.clock import ManualClock
from extender.wire.report import report_decoder

ROOT = Path(__file__).resolve().parents[2]


def run_agent(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "extender.cli", "agent", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_once_prints_one_report_as_json() -> None:
    done = run_agent(
        "--driver", "simulated", "--simulated-gpus", "2xH100:80Gi,1xL4:24Gi",
        "--node", "gpu-node-7", "--seed", "5", "--once",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    report = report_decoder.decode(done.stdout)
    assert report.node == "gpu-node-7" and report.driver == "simulated"
    assert [(g.model, g.memory_total_mib) for g in report.gpus] == [
        ("H100", 81920),
        ("H100", 81920),
        ("L4", 24576),
    ]
    again = run_agent(
        "--driver", "simulated", "--simulated-gpus", "2xH100:80Gi,1xL4:24Gi",
        "--node", "gpu-node-7", "--seed", "5", "--once",
    )  # fmt: skip
    assert [g.uuid for g in report_decoder.decode(again.stdout).gpus] == [
        g.uuid for g in report.gpus
    ]


def test_node_defaults_to_node_name_env() -> None:
    env = {**os.environ, "NODE_NAME": "from-downward-api"}
    done = run_agent("--driver", "simulated", "--once", env=env)
    assert report_decoder.decode(done.stdout).node == "from-downward-api"


def test_nvml_init_failure_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    assert main(["agent", "--driver", "nvml", "--node", "n1", "--once"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "headroom agent: NVML init failed: driver not loaded (NVMLError_DriverNotLoaded) — is "
        "this a GPU node with the NVIDIA driver and the device mounted?\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["agent", "--driver", "simulated", "--once"], "--node or $NODE_NAME is required"),
        (["agent", "--driver", "simulated", "--node", "n1"], "--extender URL is required"),
        (
            ["agent", "--driver", "simulated", "--node", "n1", "--simulated-gpus", "4xA10G"],
            "--extender URL is required",
        ),
        (
            ["agent", "--driver", "simulated", "--node", "n1", "--once", "--simulated-gpus", "x"],
            "bad GPU spec 'x'",
        ),
    ],
)
def test_usage_errors(
    argv: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(argv) in (1, 2)
    assert message in capsys.readouterr().err


def test_add_agent_command_registers_on_the_lead_parser() -> None:
    parser = argparse.ArgumentParser(prog="headroom")
    subs = parser.add_subparsers(dest="command")
    sub = add_agent_command(subs)
    assert isinstance(sub, argparse.ArgumentParser)
    args = parser.parse_args(
        ["agent", "--driver", "simulated", "--node", "n", "--extender", "http://x:1",
         "--interval", "2.5", "--token-file", "/t", "--metrics-port", "0", "--seed", "9"]
    )  # fmt: skip
    assert (args.command, args.driver, args.interval, args.token_file) == (
        "agent", "simulated", 2.5, "/t",
    )  # fmt: skip
    assert (args.metrics_port, args.seed) == (0, 9)
    assert callable(args.func)
    with pytest.raises(SystemExit):
        parser.parse_args(["agent", "--interval", "0"])


def test_metrics_server_serves_metrics_and_health() -> None:
    sim = SimulatedDriver("1xL4:24Gi", node="n1")
    sim.start_process("pod-z", sim.gpu_uuids[0], 700)
    metrics = AgentMetrics(CollectorRegistry())
    agent = Agent(sim, "n1", sim.attribute, ManualClock(), metrics=metrics, interval_s=1.0)
    server = MetricsServer(metrics.registry, agent.healthy, port=0, host="127.0.0.1").start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert httpx.get(base + "/healthz").status_code == 503  # nothing sampled yet
        agent.sample()
        assert httpx.get(base + "/healthz").status_code == 200
        text = httpx.get(base + "/metrics").text
        assert "headroom_agent_pod_gpu_memory_used_bytes{container=" in text
        assert 'pod_uid="pod-z"' in text
        assert httpx.get(base + "/nope").status_code == 404
    finally:
        server.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_agent_process_reports_serves_metrics_and_stops_on_sigterm(
    report_server: ReportServer, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("process-token-123")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender.cli", "agent", "--driver", "simulated",
         "--simulated-gpus", "2xA10G:24Gi", "--node", "n-proc", "--extender", report_server.url,
         "--interval", "0.2", "--token-file", str(token), "--metrics-port", str(port)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert report_server.wait_for(2), "agent sent no reports"
        # The metrics server starts before the first sample, and reports follow samples.
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert "headroom_agent_gpu_memory_total_bytes{" in metrics
        assert "headroom_agent_report_send_duration_seconds_count" in metrics
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    received = report_server.received
    assert all(r.authorization == "Bearer process-token-123" for r in received)
    assert {r.report.node for r in received} == {"n-proc"}
    logs = [json.loads(line) for line in stderr.decode().splitlines() if line.strip()]
    assert {"agent started", "agent stopped"} <= {entry["msg"] for entry in logs}
    assert "process-token-123" not in stderr.decode()
