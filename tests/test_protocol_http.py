"""The extender protocol over real HTTP, with bodies shaped as kube-scheduler sends them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest

from extender.core.allocation import Sharing, Status
from extender.dra.state import DraState
from extender.wire.protocol import Pod
from tests.support import Extender, gpu_pod, real_node, running_extender

FILTER_KEYS = {"NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


@pytest.fixture
def ext(tmp_path: Path) -> Iterator[Extender]:
    with running_extender(tmp_path, policy="binpack") as e:
        e.add_node("n-spot", "4xA10G:24Gi", capacity_type="spot")
        e.add_node("n-od", "4xA10G:24Gi", capacity_type="on-demand")
        yield e


def nodes_mode(pod: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}


def test_filter_nodes_mode_echoes_full_nodes_and_gives_reasons(ext: Extender) -> None:
    disrupted = real_node(
        "n-od",
        capacity_type="on-demand",
        taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}],
    )
    items = [real_node("n-spot"), disrupted, real_node("n-unknown")]
    r = ext.post("filter", nodes_mode(gpu_pod("p1", memory="10Gi"), items))
    assert r.status_code == 200
    body = r.json()
    assert set(body) == FILTER_KEYS | {"Nodes"}
    assert body["Error"] == "" and body["NodeNames"] is None
    assert body["Nodes"]["items"] == [items[0]]  # the passing Node, byte-for-byte the same object
    assert "karpenter.sh/disrupted" in body["FailedAndUnresolvableNodes"]["n-od"]
    assert "no report from the headroom agent" in body["FailedAndUnresolvableNodes"]["n-unknown"]
    assert body["FailedNodes"] == {}


def test_filter_node_names_mode_and_exact_reply_keys(ext: Extender) -> None:
    pod = gpu_pod("p2", gpus=2, memory="30Gi")  # bigger than an A10G
    r = ext.post("filter", ext.schedule_args(pod, ["n-spot", "n-od"]))
    body = r.json()
    assert set(body) == FILTER_KEYS
    assert body["NodeNames"] == []
    assert "30.0 GiB" in body["FailedAndUnresolvableNodes"]["n-spot"]


def test_on_demand_only_pod_never_passes_spot(ext: Extender) -> None:
    pod = gpu_pod("p3", memory="4Gi", annotations={"karpenter.sh/do-not-disrupt": "true"})
    body = ext.post("filter", ext.schedule_args(pod, ["n-spot", "n-od"])).json()
    assert body["NodeNames"] == ["n-od"]
    assert "spot" in body["FailedAndUnresolvableNodes"]["n-spot"]


def test_prioritize_prefers_cheap_headroom(ext: Extender) -> None:
    r = ext.post("prioritize", ext.schedule_args(gpu_pod("p4", memory="8Gi"), ["n-spot", "n-od"]))
    scores = r.json()
    assert isinstance(scores, list)
    assert all(set(s) == {"Host", "Score"} and isinstance(s["Score"], int) for s in scores)
    by_host = {s["Host"]: s["Score"] for s in scores}
    assert all(0 <= v <= 10 for v in by_host.values())
    assert by_host["n-spot"] > by_host["n-od"]  # same GPUs, spot is 60% cheaper


def test_bind_records_the_decision_and_annotates(ext: Extender) -> None:
    pod = gpu_pod("p5", gpus=2, memory="10Gi")
    ext.post("filter", ext.schedule_args(pod, ["n-od"]))
    r = ext.post(
        "bind", {"PodName": "p5", "PodNamespace": "ml", "PodUID": "uid-p5", "Node": "n-od"}
    )
    assert r.json() == {"Error": ""}
    ledger = ext.built.service.ledger
    assert len(ledger.for_pod("uid-p5")) == 2  # the decision is durable before the answer
    ledger.flush()  # the bound status rides in a later transaction (ledger/group.py)
    rows = ledger.for_pod("uid-p5")
    assert len(rows) == 2 and {a.status for a in rows} == {Status.BOUND}
    assert {a.grant.memory_mib for a in rows} == {10240}
    assert all(
        a.grant.sharing is Sharing.SHARED and a.node.instance_type == "g5.12xlarge" for a in rows
    )
    ann = ext.built.service.binder.annotations_of("uid-p5")  # type: ignore[attr-defined]
    assert set(ann["headroom.dev/gpu-uuids"].split(",")) == {a.grant.gpu_uuid for a in rows}
    assert ann["headroom.dev/gpu-memory-mib"] == "10240"
    # binding again to the same node is idempotent; to another node it is refused
    again = {"PodName": "p5", "PodNamespace": "ml", "PodUID": "uid-p5", "Node": "n-od"}
    assert ext.post("bind", again).json() == {"Error": ""}
    assert len(ext.built.service.ledger.for_pod("uid-p5")) == 2
    moved = ext.post("bind", {**again, "Node": "n-spot"}).json()
    assert "already holds GPUs on node n-od" in moved["Error"]


def test_whole_gpu_grant_is_exclusive_and_priced_as_the_whole_gpu(ext: Extender) -> None:
    ext.post("filter", ext.schedule_args(gpu_pod("p6"), ["n-od"]))
    ext.post("bind", {"PodName": "p6", "PodNamespace": "ml", "PodUID": "uid-p6", "Node": "n-od"})
    (row,) = ext.built.service.ledger.for_pod("uid-p6")
    assert row.grant.sharing is Sharing.EXCLUSIVE
    assert row.grant.memory_mib == row.grant.gpu_total_mib == 24576
    assert row.grant.price_per_hour == Decimal("5.672") / 4


def test_preempt_keeps_only_nodes_where_victims_free_enough(ext: Extender) -> None:
    for i in range(4):  # fill n-od with four whole-GPU pods
        ext.post("filter", ext.schedule_args(gpu_pod(f"w{i}"), ["n-od"]))
        bound = ext.post(
            "bind",
            {"PodName": f"w{i}", "PodNamespace": "ml", "PodUID": f"uid-w{i}", "Node": "n-od"},
        )
        assert bound.json()["Error"] == ""
    pod = gpu_pod("big", gpus=2)
    args = {
        "Pod": pod,
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {
            "n-od": {"Pods": [{"UID": "uid-w0"}, {"UID": "uid-w1"}], "NumPDBViolations": 0},
            "n-spot": {"Pods": [], "NumPDBViolations": 0},
        },
    }
    kept = ext.post("preempt", args).json()["NodeNameToMetaVictims"]
    assert kept["n-od"]["Pods"] == [{"UID": "uid-w0"}, {"UID": "uid-w1"}]
    assert "n-spot" in kept  # fits already: empty victims are kept (kubernetes PR #135486)
    one = {
        **args,
        "NodeNameToMetaVictims": {"n-od": {"Pods": [{"UID": "uid-w0"}], "NumPDBViolations": 0}},
    }
    assert ext.post("preempt", one).json() == {"NodeNameToMetaVictims": {}}


def test_non_gpu_pod_passes_every_node_untouched(ext: Extender) -> None:
    items = [real_node("cpu-a"), real_node("cpu-b")]
    body = ext.post("filter", nodes_mode(gpu_pod("web", gpus=0), items)).json()
    assert body["Nodes"]["items"] == items and body["FailedNodes"] == {}
    scores = ext.post("prioritize", ext.schedule_args(gpu_pod("web", gpus=0), ["cpu-a"])).json()
    assert scores == [{"Host": "cpu-a", "Score": 0}]


CAPTURED = Path(__file__).parent / "fixtures" / "scheduler_requests"


@pytest.mark.skipif(not (CAPTURED / "filter.json").exists(), reason="no captured traffic yet")
def test_bodies_captured_from_the_real_kube_scheduler_decode(ext: Extender) -> None:
    """Requests recorded from kube-scheduler (tests/e2e) are understood field for field."""
    for verb in ("filter", "prioritize", "preempt"):
        body = json.loads((CAPTURED / f"{verb}.json").read_text())
        r = ext.post(verb, body)
        assert r.status_code == 200, r.text
    bind = json.loads((CAPTURED / "bind.json").read_text())
    assert set(bind) == {"PodName", "PodNamespace", "PodUID", "Node"}


def test_nodes_mode_sees_a_changed_node_object(ext: Extender) -> None:
    """Unchanged Node objects are not re-decoded, but a changed one (new taint) is. As
    from the API server, every change comes with a new resourceVersion."""
    pod = gpu_pod("p-taint", memory="4Gi")
    plain = real_node("n-spot")
    plain["metadata"]["resourceVersion"] = "1001"
    first = ext.post("filter", nodes_mode(pod, [plain])).json()
    assert first["Nodes"]["items"] == [plain]
    tainted = real_node(
        "n-spot", taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
    )
    tainted["metadata"]["resourceVersion"] = "1002"
    second = ext.post("filter", nodes_mode(pod, [tainted])).json()
    assert second["Nodes"]["items"] == []
    assert "disrupted" in second["FailedAndUnresolvableNodes"]["n-spot"]
    plain["metadata"]["resourceVersion"] = "1003"
    third = ext.post("filter", nodes_mode(pod, [plain])).json()
    assert third["Nodes"]["items"] == [plain]  # the taint went away again


def test_bind_of_a_pod_filter_never_saw_reads_it_without_touching_the_mix(
    ext: Extender,
) -> None:
    """After a restart kube-scheduler may bind a pod this replica never filtered: bind
    looks it up and decides, and (running on a bind thread) leaves the pods seen and the
    workload mix, which filter reads on the event loop, as they were."""
    pod = msgspec.convert(gpu_pod("p-unseen", memory="6Gi"), Pod)
    service = ext.built.service
    service.watch_cluster(DraState(), lambda uid: pod if uid == pod.metadata.uid else None)
    mix_before = service.mix.version
    args = {"PodName": "p-unseen", "PodNamespace": "ml", "PodUID": pod.metadata.uid, "Node": "n-od"}
    assert ext.post("bind", args).json() == {"Error": ""}
    (row,) = service.ledger.for_pod(pod.metadata.uid)
    assert row.grant.memory_mib == 6 * 1024
    assert service.mix.version == mix_before


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind", "preempt"])
def test_a_verb_called_with_another_method_is_refused_in_the_protocols_shape(
    ext: Extender, verb: str
) -> None:
    """The verbs are served beside FastAPI's router (``Edge`` hands them over), so their
    refusals keep the verbs' own shape: ``Error``, and which method they take."""
    r = ext.client.get(f"/{verb}")
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"
    assert r.json() == {"Error": f"/{verb} takes POST"}


def test_a_bind_is_followed_by_the_plans_refresh(ext: Extender) -> None:
    """After each bind's reply the plans of the shapes filtered lately are brought up to
    date, on the event loop before its next request: the next filter of the shape finds
    its answer made."""
    service = ext.built.service
    refreshed = service.cycle.refresh
    calls: list[int] = []

    def refresh() -> int:
        calls.append(refreshed())
        return calls[-1]

    service.cycle.refresh = refresh  # type: ignore[method-assign]
    for i in range(4):  # every GPU of n-spot taken by a 20 GiB pod
        pod = gpu_pod(f"p{i}", memory="20Gi")
        assert ext.post("filter", ext.schedule_args(pod, ["n-spot"])).json()["NodeNames"]
        bind = {"PodName": f"p{i}", "PodNamespace": "ml", "PodUID": pod["metadata"]["uid"]}
        assert ext.post("bind", {**bind, "Node": "n-spot"}).json() == {"Error": ""}
    last = ext.post("filter", ext.schedule_args(gpu_pod("p4", memory="20Gi"), ["n-spot", "n-od"]))
    assert last.json()["NodeNames"] == ["n-od"]
    assert len(calls) == 4 and all(n >= 1 for n in calls)
