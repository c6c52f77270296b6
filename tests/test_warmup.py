"""The start-up warm-up runs the scheduling path through the real route handlers and a
scratch app, and leaves no trace: no metric, workload mix, inventory, plan, codec entry
or ledger row changes, and the scheduler answers as it would have without it."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

import extender.http.warmup as warmup
import extender.state.columns as columns
from extender.ledger.metrics import REGISTRY
from extender.scheduling.service import SchedulingService
from tests.support import Extender, gpu_pod, running_extender


def _state(ext: Extender) -> dict[str, Any]:
    """Everything a user (or the next request) could see of the extender's state."""
    service: SchedulingService = ext.built.service
    service.writer.flush()
    codec = ext.built.app.state.codec
    cols = service.inventory.columns()
    ledger = service.ledger
    return {
        "metrics": generate_latest(REGISTRY),
        "mix": (service.mix.version, list(service.mix.mix)),
        "inventory": (service.inventory.seq, cols.layout, service.nodes()),
        "plans": list(service.cycle.plans._plans),
        "hot": [d.key for d in service.cycle.hot.recent(ext.clock.now())],
        "codec": (codec.index.count, codec.index.token, list(codec._args._lists)),
        "ledger": (
            ledger.active(),
            [(e.seq, e.kind) for e in ledger.list_events(limit=10_000)],
            ledger.nodes(),
        ),
    }


def test_the_warm_up_leaves_no_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with running_extender(tmp_path) as ext:
        for i in range(3):
            ext.add_node(f"gpu-{i}", seed=i)
        pod = gpu_pod("p", memory="4Gi")
        before_reply = ext.post("filter", ext.schedule_args(pod, ["gpu-2", "gpu-0", "gpu-1"]))
        before = _state(ext)
        answered: list[tuple[str, int]] = []
        real_call = warmup.call

        async def call(app: Any, path: str, body: bytes) -> tuple[int, bytes]:
            status, reply = await real_call(app, path, body)
            answered.append((path, status))
            return status, reply

        monkeypatch.setattr(warmup, "call", call)
        asyncio.run(warmup.warm_up(ext.built.app, ext.built.service, nodes=64))
        # the real handlers refused the empty bodies; the scratch app answered both
        assert answered == [
            ("/filter", 400),
            ("/prioritize", 400),
            ("/filter", 200),
            ("/prioritize", 200),
        ]
        assert _state(ext) == before
        after_reply = ext.post("filter", ext.schedule_args(pod, ["gpu-2", "gpu-0", "gpu-1"]))
        assert after_reply.json() == before_reply.json()


def test_the_first_filter_reads_no_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FastAPI reads an endpoint's source on its first call; the verbs do not go through
    FastAPI's endpoints (``Edge`` hands them over), so even without the warm-up the
    first filter and prioritize read none."""
    with running_extender(tmp_path) as ext:
        ext.add_node("gpu-0")
        read: list[str] = []
        real_lines = inspect.getsourcelines

        def getsourcelines(obj: Any) -> tuple[list[str], int]:
            read.append(getattr(obj, "__name__", "?"))
            return real_lines(obj)

        monkeypatch.setattr(inspect, "getsourcelines", getsourcelines)
        args = ext.schedule_args(gpu_pod("p", memory="4Gi"), ["gpu-0"])
        assert ext.post("filter", args).json()["NodeNames"] == ["gpu-0"]
        assert ext.post("prioritize", args).status_code == 200
        assert read == []


def test_a_failing_warm_up_is_logged_and_start_up_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*_: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(warmup, "_scratch", broken)
    with running_extender(tmp_path) as ext:
        asyncio.run(warmup.warm_up(ext.built.app, ext.built.service))
        assert "warm-up failed" in caplog.text
        assert ext.post("filter", ext.schedule_args(gpu_pod("p"), [])).status_code == 200


def test_the_warm_up_reads_its_list_through_the_row_order_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet's agents report in no particular order, so the first real list's rows are
    not in list order: it is read in row order and its answers put back
    (``columns._ascending``, ``framework.evaluate_rows``' ``order``). The warm-up's
    nodes report so too, so the first filter finds that path run once already."""
    orders: list[object] = []
    real = columns._ascending

    def ascending(rows: Any) -> Any:
        order = real(rows)
        orders.append(order)
        return order

    monkeypatch.setattr(columns, "_ascending", ascending)
    with running_extender(tmp_path) as ext:
        asyncio.run(warmup.warm_up(ext.built.app, ext.built.service, nodes=300))
    assert any(order is not None for order in orders)
