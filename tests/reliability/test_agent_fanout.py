"""HA: each agent report must reach every extender replica (each keeps reports in
memory). The agent takes several URLs and resolves a DNS name to all its A records on
every send (a headless Service), posting to each address."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from drivers.agent.loop import build_report
from drivers.agent.metrics import AgentMetrics
from drivers.agent.sender import ReportSender, expand
from drivers.gpu.simulated import SimulatedDriver
from extender.simulate.server_thread import free_port
from extender.wire.clock import SystemClock
from tests.support import running_extender


class Recorder(ThreadingHTTPServer):
    def __init__(self, host: str, port: int) -> None:
        self.hosts: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                recorder.hosts.append(self.headers["Host"])
                out = json.dumps(
                    {"accepted": True, "node": body["node"], "received_at": 1.0}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__((host, port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.fixture
def two_replicas() -> Iterator[tuple[int, list[Recorder]]]:
    port = free_port()
    replicas = [Recorder("127.0.0.1", port), Recorder("127.0.0.2", port)]
    yield port, replicas
    for r in replicas:
        r.shutdown()
        r.server_close()


def report() -> object:
    d = SimulatedDriver("1xA10G:24Gi", seed=1, node="n1")
    return build_report(d, "n1", d.attribute, SystemClock())


def test_dns_name_fans_out_to_every_address(two_replicas: tuple[int, list[Recorder]]) -> None:
    port, replicas = two_replicas
    addresses = ["127.0.0.1", "127.0.0.2"]
    sender = ReportSender(
        f"http://extenders.headroom.test:{port}",
        metrics=AgentMetrics(CollectorRegistry()),
        resolve=lambda host: list(addresses),
    )
    try:
        assert sender.send(report(), budget_s=5) is not None  # type: ignore[arg-type]
        assert [r.hosts for r in replicas] == [[f"extenders.headroom.test:{port}"]] * 2
        addresses.pop()  # a replica went away: resolved again on the next send
        assert sender.send(report(), budget_s=5) is not None  # type: ignore[arg-type]
        assert [len(r.hosts) for r in replicas] == [2, 1]
    finally:
        sender.close()


def test_one_replica_down_still_delivers(two_replicas: tuple[int, list[Recorder]]) -> None:
    port, replicas = two_replicas
    metrics = AgentMetrics(CollectorRegistry())
    sender = ReportSender(
        f"http://127.0.0.1:{port},http://127.0.0.3:{free_port()}",
        metrics=metrics,
        max_attempts=2,
        backoff_initial_s=0.01,
    )
    try:
        assert sender.send(report(), budget_s=2) is not None  # type: ignore[arg-type]
        assert len(replicas[0].hosts) == 1
        assert metrics.reports_sent._value.get() == 1  # counted once, not per replica
    finally:
        sender.close()


def test_expand_leaves_ips_and_https_alone() -> None:
    def boom(host: str) -> list[str]:
        raise AssertionError(f"resolved {host}")

    assert expand("http://10.0.0.1:8888", boom) == [("http://10.0.0.1:8888", None)]
    assert expand("https://headroom.svc:8443", boom) == [("https://headroom.svc:8443", None)]

    def nx(host: str) -> list[str]:
        raise OSError("NXDOMAIN")

    assert expand("http://gone.svc:8888", nx) == [("http://gone.svc:8888", None)]


def test_both_real_extenders_learn_the_node(tmp_path: Path) -> None:
    """Two real extenders (the HA pair): after one agent send, both know node n1."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with running_extender(tmp_path / "a") as a, running_extender(tmp_path / "b") as b:
        token = tmp_path / "a" / "agent-token"
        sender = ReportSender(f"{a.url},{b.url}", token, metrics=AgentMetrics(CollectorRegistry()))
        try:
            assert sender.send(report(), budget_s=5) is not None  # type: ignore[arg-type]
        finally:
            sender.close()
        for ext in (a, b):
            assert ext.built.service.inventory.received_at("n1") is not None
