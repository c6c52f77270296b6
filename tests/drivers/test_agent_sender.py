"""Report delivery against a real HTTP server: auth, retries, bounds, the loop."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from drivers_report_server import ReportServer
from prometheus_client import CollectorRegistry

from drivers.agent.loop import Agent
from drivers.agent.metrics import AgentMetrics
from drivers.agent.sender import ReportSender
from drivers.gpu.simulated import SimulatedDriver
from extender.wire.clock import ManualClock
from extender.wire.report import NodeReport, PodGrant


class SteppingClock:
    """Every reading is one second later: each sample gets a distinct timestamp."""

    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def now(self) -> float:
        self.t += 1.0
        return self.t


def a_report(node: str = "n1") -> NodeReport:
    return NodeReport(node=node, sampled_at=1.0, gpus=[])


def sender_for(url: str, token_file: Path | None = None, **kw: object) -> ReportSender:
    sleeps: list[float] = kw.pop("sleeps", [])  # type: ignore[assignment]
    return ReportSender(
        url,
        token_file,
        metrics=AgentMetrics(CollectorRegistry()),
        sleep=sleeps.append,
        **kw,  # type: ignore[arg-type]
    )


def failures(sender: ReportSender, reason: str) -> float:
    value = sender.metrics.registry.get_sample_value(
        "headroom_agent_report_send_failures_total", {"reason": reason}
    )
    return value or 0.0


def counter(sender: ReportSender, name: str) -> float:
    return sender.metrics.registry.get_sample_value(name) or 0.0


def test_bearer_token_is_sent_and_reread_on_every_send(
    report_server: ReportServer, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("first-token\n")
    sender = sender_for(report_server.url, token)
    assert sender.send(a_report(), budget_s=5.0) is not None
    token.write_text("rotated-token")  # the kubelet rotated the projected token
    response = sender.send(a_report(), budget_s=5.0)
    assert response is not None and response.accepted and response.node == "n1"
    assert [(r.path, r.authorization) for r in report_server.received] == [
        ("/v1/reports", "Bearer first-token"),
        ("/v1/reports", "Bearer rotated-token"),
    ]


def test_no_token_file_sends_no_authorization(report_server: ReportServer) -> None:
    assert sender_for(report_server.url + "/").send(a_report(), budget_s=5.0) is not None
    assert report_server.received[0].authorization is None
    assert report_server.received[0].path == "/v1/reports"


def test_retries_503_with_backoff_then_succeeds(report_server: ReportServer) -> None:
    report_server.statuses = [503, 503, 200]
    report_server.grants = [PodGrant("p", "ns", "name", ["GPU-1"], 100)]
    sleeps: list[float] = []
    sender = sender_for(report_server.url, sleeps=sleeps, backoff_initial_s=0.2, backoff_max_s=5)
    response = sender.send(a_report(), budget_s=30.0)
    assert response is not None and response.grants == report_server.grants
    assert len(report_server.received) == 3
    assert len(sleeps) == 2
    assert 0.2 <= sleeps[0] <= 0.4 and 0.4 <= sleeps[1] <= 0.6  # exponential, with jitter
    assert failures(sender, "http_503") == 2
    assert counter(sender, "headroom_agent_reports_sent_total") == 1


def test_client_errors_are_not_retried(report_server: ReportServer) -> None:
    report_server.statuses = [400]
    sender = sender_for(report_server.url)
    assert sender.send(a_report(), budget_s=30.0) is None
    assert len(report_server.received) == 1
    assert failures(sender, "http_400") == 1
    assert counter(sender, "headroom_agent_reports_dropped_total") == 1


def test_dead_extender_gives_up_after_bounded_attempts(dead_url: str) -> None:
    sleeps: list[float] = []
    sender = sender_for(dead_url, sleeps=sleeps, max_attempts=4)
    assert sender.send(a_report(), budget_s=30.0) is None
    assert failures(sender, "transport") == 4
    assert len(sleeps) == 3
    assert counter(sender, "headroom_agent_reports_dropped_total") == 1


def test_retries_stop_before_the_budget_runs_out(report_server: ReportServer) -> None:
    report_server.statuses = [503]
    sleeps: list[float] = []
    sender = sender_for(report_server.url, sleeps=sleeps, backoff_initial_s=10.0, max_attempts=9)
    assert sender.send(a_report(), budget_s=1.0) is None
    assert len(report_server.received) == 1  # the first backoff (10 s) would exceed 1 s
    assert sleeps == []


def test_a_hanging_extender_times_out(report_server: ReportServer) -> None:
    report_server.delay_s = 1.0
    sender = sender_for(report_server.url, timeout_s=0.1, max_attempts=2)
    assert sender.send(a_report(), budget_s=30.0) is None
    assert failures(sender, "timeout") == 2


def test_unreadable_token_fails_without_sending(
    report_server: ReportServer, tmp_path: Path
) -> None:
    sender = sender_for(report_server.url, tmp_path / "missing", max_attempts=2)
    assert sender.send(a_report(), budget_s=30.0) is None
    assert report_server.received == []
    assert failures(sender, "token") == 2


def test_the_token_never_reaches_the_logs(
    report_server: ReportServer, dead_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "eyJhbGciOiJSUzI1NiJ9.super-secret-token"
    token = tmp_path / "token"
    token.write_text(secret)
    caplog.set_level(logging.DEBUG)
    report_server.statuses = [401]
    sender_for(report_server.url, token).send(a_report(), budget_s=5.0)
    sender_for(dead_url, token, max_attempts=2).send(a_report(), budget_s=5.0)
    assert caplog.records  # the failures were logged...
    for record in caplog.records:  # ...without the token, in message or fields
        assert secret not in record.getMessage()
        assert secret not in repr(getattr(record, "fields", ""))
    assert report_server.received[0].authorization == f"Bearer {secret}"


def test_loop_sends_one_report_at_a_time_and_never_piles_up(
    report_server: ReportServer,
) -> None:
    report_server.statuses = [503]
    report_server.delay_s = 0.02
    sim = SimulatedDriver("1xL4:24Gi", node="n1")
    sender = ReportSender(
        report_server.url,
        metrics=AgentMetrics(CollectorRegistry()),
        max_attempts=3,
        backoff_initial_s=0.01,
        backoff_max_s=0.02,
    )
    agent = Agent(sim, "n1", sim.attribute, SteppingClock(), sender=sender, interval_s=0.3)
    assert agent.run(threading.Event(), max_ticks=3) == 3

    sent = [r.report.sampled_at for r in report_server.received]
    assert report_server.max_in_flight == 1
    assert len(sent) <= 3 * 3  # each sample retried at most max_attempts times
    assert sent == sorted(sent) and len(set(sent)) == 3  # one report per tick, none queued
    assert counter(sender, "headroom_agent_reports_dropped_total") == 3

    report_server.statuses = [200]
    report_server.received.clear()
    agent.run(threading.Event(), max_ticks=1)
    (delivered,) = report_server.received
    assert delivered.report.sampled_at > max(sent)  # a fresh sample, not a backlog
    assert agent.state.have_grants


def test_stop_event_ends_the_loop(report_server: ReportServer) -> None:
    sim = SimulatedDriver("1xL4:24Gi")
    sender = ReportSender(report_server.url, metrics=AgentMetrics(CollectorRegistry()))
    agent = Agent(sim, "n1", sim.attribute, ManualClock(), sender=sender, interval_s=30.0)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,))
    thread.start()
    assert report_server.wait_for(1)
    stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive()
