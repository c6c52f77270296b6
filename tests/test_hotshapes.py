"""After an agent report, the plans of the shapes scheduled lately are brought up to date
off the scheduling cycle: the next pod of such a shape gets its answer without an
evaluation, the very answer a fresh evaluation gives, and a shape not scheduled lately
is left to its next filter."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec
import pytest

from drivers.agent.loop import build_report
from drivers.gpu.simulated import SimulatedDriver
from extender.ledger import open_ledger
from extender.pricing import load_pricebook
from extender.scheduling.binder import InProcessBinder
from extender.scheduling.hotshapes import HotShapes
from extender.scheduling.plans import Plans
from extender.scheduling.service import SchedulingService, ServiceConfig
from extender.scoring import policy_by_name
from extender.state.demand import GpuDemand
from extender.state.inventory import Inventory
from extender.wire.clock import ManualClock
from extender.wire.protocol import ExtenderArgs
from tests.support import gpu_pod, running_extender
from tests.wire_client import WireClient

NODES = [f"node-{i:02d}" for i in range(40)]


def service_of(tmp_path: Path, nodes: Sequence[str]) -> Iterator[SchedulingService]:
    """Nodes reporting in this order, some too full for the 16Gi pods below (failure
    reasons), prices apart; its ledger writer closed after the test."""
    clock = ManualClock()
    svc = SchedulingService(
        Inventory(load_pricebook()),
        open_ledger(str(tmp_path / "l.db"), clock),
        InProcessBinder(),
        policy_by_name("headroom"),
        clock,
        ServiceConfig(stale_after=3600, narrow_epsilon=0.05),
    )
    for name in nodes:
        report_used(svc, name, 1024 * (int(name.split("-")[1]) % 12))
    yield svc
    svc.writer.close()


def report_used(svc: SchedulingService, name: str, mib: int) -> None:
    """The node ``node-<i>`` reports its one A10G with ``mib`` in use (its labels and GPU
    follow from i)."""
    i = int(name.split("-")[1])
    d = SimulatedDriver("1xA10G:24Gi", seed=i, node=name, clock=svc.clock)
    d.start_process("hog", d.gpu_uuids[0], mib)
    labels = {
        "node.kubernetes.io/instance-type": ("g5.xlarge", "g5.2xlarge")[i % 2],
        "karpenter.sh/capacity-type": ("spot", "on-demand")[i % 3 == 0],
    }
    svc.report(build_report(d, name, d.attribute, svc.clock, labels=labels))


def pod(uid: str, memory: str = "16Gi") -> dict:
    return {
        "metadata": {
            "name": uid,
            "namespace": "t",
            "uid": uid,
            "annotations": {"headroom.dev/gpu-memory": memory},
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


class Asker:
    """filter and prioritize as the server calls them (``WireClient``), every pod of
    the shape ``memory`` asks for."""

    def __init__(self, svc: SchedulingService) -> None:
        self.svc, self.wire, self.memory = svc, WireClient(svc), "16Gi"

    def args(self, uid: str, names: Sequence[str]) -> ExtenderArgs:
        return self.wire.args(pod(uid, self.memory), names)

    def filter(self, uid: str, names: Sequence[str]) -> tuple[dict, Sequence[str]]:
        return self.wire.filter(self.args(uid, names))

    def prioritize(self, uid: str, names: Sequence[str]) -> list:
        return self.wire.prioritize(self.args(uid, names))

    def fresh(self, verb: str, uid: str, names: Sequence[str]) -> object:
        """The same ask with no plan kept (every node evaluated afresh), the plans kept
        before back after it."""
        kept, self.svc.cycle.plans = self.svc.cycle.plans, Plans()
        answer = getattr(self, verb)(uid, names)
        self.svc.cycle.plans = kept
        return answer[0] if verb == "filter" else answer


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[SchedulingService]:
    yield from service_of(tmp_path, NODES)


def no_evaluation(monkeypatch: pytest.MonkeyPatch, svc: SchedulingService) -> None:
    monkeypatch.setattr(
        svc.evaluator, "names", lambda *a: pytest.fail("evaluated on the scheduling cycle")
    )


def test_the_next_pod_of_a_hot_shape_finds_its_answer_made(
    svc: SchedulingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    ask = Asker(svc)
    _, passing = ask.filter("p0", NODES)
    gone = passing[0]
    report_used(svc, gone, 23 * 1024)  # a passing node is full now
    assert svc.refresh() == 1
    with monkeypatch.context() as m:
        no_evaluation(m, svc)
        reply, passing = ask.filter("p1", NODES)
        scores = ask.prioritize("p1", passing)
    assert gone in reply["FailedNodes"] and gone not in passing
    assert reply == ask.fresh("filter", "p1", NODES)
    assert scores == ask.fresh("prioritize", "p1", list(passing))


def test_only_shapes_filtered_lately_are_refreshed(
    svc: SchedulingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most ``refresh_shapes`` of them, the latest first, and none filtered longer than
    ``refresh_window`` ago: those are patched by their next filter, as before."""
    ask = Asker(svc)
    for memory in ("16Gi", "8Gi", "4Gi"):  # three shapes, two kept hot
        ask.memory = memory
        ask.filter(memory, NODES)
    report_used(svc, NODES[3], 2048)
    assert svc.refresh() == 2
    report_used(svc, NODES[4], 4096)
    assert isinstance(svc.clock, ManualClock)
    svc.clock.advance(svc.config.refresh_window + 1)
    assert svc.refresh() == 0
    ask.memory = "4Gi"  # its plan is patched by the filter itself: the same answer
    assert ask.filter("late", NODES)[0] == ask.fresh("filter", "late", NODES)


def test_a_widest_plan_its_shapes_filters_no_longer_ask_for_is_left_alone(
    svc: SchedulingService,
) -> None:
    """kube-scheduler's lists shrink as nodes fill: once the shape's latest filter came
    with another list, the shape's widest plan is not refreshed; a filter that asks for
    it again patches it itself, with the answer a fresh evaluation gives."""
    ask = Asker(svc)
    ask.filter("p0", NODES)  # the shape's widest plan
    ask.filter("p1", NODES[1:])  # the next pod's list lacks a node: not that plan
    report_used(svc, NODES[5], 2048)
    assert svc.refresh() == 0
    reply, _ = ask.filter("p2", NODES)  # asked for again: patched by this filter
    assert reply == ask.fresh("filter", "p2", NODES)
    report_used(svc, NODES[6], 4096)
    assert svc.refresh() == 1  # its shape's latest filter asked for it


def test_hot_shapes_keep_the_latest_within_the_window() -> None:
    hot = HotShapes(limit=2, window=10)
    a, b, c = (GpuDemand(1, m) for m in (1024, 2048, 4096))
    hot.touch(a, 0)
    hot.touch(b, 1)
    hot.touch(a, 2)  # again: the latest now
    assert hot.recent(5) == [a, b]
    hot.touch(c, 3)
    assert hot.recent(5) == [c, a] and hot.recent(12.5) == [c]
    off = HotShapes(limit=0)
    off.touch(a, 0)
    assert off.recent(0) == []


def test_the_server_refreshes_after_answering_a_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Over HTTP: a report's reply comes first, then the hot shape's plan is patched (the
    next request on the connection finds it done); a refresh that fails is logged and
    the report is still accepted."""
    with running_extender(tmp_path) as ext:
        for i in range(6):
            ext.add_node(f"n{i}", spec="2xA10G:24Gi", seed=i)
        names = [f"n{i}" for i in range(6)]
        body = ext.schedule_args(gpu_pod("p0", memory="20Gi"), names)
        first = ext.post("filter", body).json()
        svc = ext.built.service
        full = ext.drivers[first["NodeNames"][0]]
        for uuid in full.gpu_uuids:
            full.start_process("hog", uuid, 20 * 1024)
        assert ext.report(first["NodeNames"][0]).json()["accepted"]
        ext.client.get("/healthz")
        with monkeypatch.context() as m:
            no_evaluation(m, svc)
            again = ext.post("filter", ext.schedule_args(gpu_pod("p1", memory="20Gi"), names))
        assert again.status_code == 200
        assert first["NodeNames"][0] in again.json()["FailedNodes"]

        def broken() -> int:
            raise RuntimeError("refresh broke")

        monkeypatch.setattr(svc, "refresh", broken)
        with caplog.at_level(logging.ERROR, logger="headroom.server"):
            assert ext.report("n1").json()["accepted"]
            ext.client.get("/healthz")
        assert any("refreshing plans" in r.getMessage() for r in caplog.records)
        assert msgspec.json.decode(ext.post("filter", body).content)["NodeNames"]


def test_after_a_bind_the_next_replica_finds_its_answer_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bind reserves memory on the chosen node (a change every plan listing it must
    see); once the bind is answered the hot shape's plan is patched, so the next replica's
    filter evaluates nothing and sees the reservation."""
    with running_extender(tmp_path) as ext:
        for i in range(4):
            ext.add_node(f"n{i}", spec="1xA10G:24Gi", seed=i)
        names = [f"n{i}" for i in range(4)]
        first = ext.post("filter", ext.schedule_args(gpu_pod("p0", memory="20Gi"), names))
        chosen = first.json()["NodeNames"][0]
        bound = ext.post(
            "bind", {"PodName": "p0", "PodNamespace": "ml", "PodUID": "uid-p0", "Node": chosen}
        )
        assert bound.status_code == 200 and not bound.json().get("Error")
        ext.client.get("/healthz")
        with monkeypatch.context() as m:
            no_evaluation(m, ext.built.service)
            again = ext.post("filter", ext.schedule_args(gpu_pod("p1", memory="20Gi"), names))
        assert again.status_code == 200
        assert chosen in again.json()["FailedNodes"]  # 20 GiB of its 24 reserved
