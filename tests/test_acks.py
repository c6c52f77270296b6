"""The extender keeps a device-plugin node unambiguous: one unacknowledged grant at a time.

A real extender over loopback HTTP with a real SQLite ledger. The cluster watch is
stood in for by the calls it makes (``node_changed`` with the node's labels,
``acknowledgement`` with the pod as the watch sees it); the whole chain with the real
API server, kube-scheduler, plugin and kubelet's device manager is
tests/e2e/test_device_plugin_burst.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from extender.core.allocation import Status
from extender.dra.state import DraState
from extender.scheduling.binder import BindError
from extender.state.nodefacts import DEVICE_PLUGIN, facts_from_labels
from extender.wire.annotations import ANN_ALLOCATED, ANN_GPU_UUIDS
from extender.wire.protocol import Pod
from tests.support import Extender, gpu_pod, running_extender


def plugin_node(ext: Extender, name: str, spec: str = "2xA10G:24Gi", label: bool = True) -> None:
    """A node whose agent reports and whose Node object the (stand-in) watch saw."""
    ext.add_node(name, spec)
    labels = {DEVICE_PLUGIN: "true"} if label else {}
    ext.built.service.node_changed(facts_from_labels(name, labels))


def watch_cluster(ext: Extender) -> None:
    ext.built.service.watch_cluster(DraState(), lambda uid: None)


def bind(ext: Extender, name: str, node: str) -> str:
    body = {"PodName": name, "PodNamespace": "ml", "PodUID": f"uid-{name}", "Node": node}
    return str(ext.post("bind", body).json()["Error"])


def filtered(ext: Extender, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    return dict(ext.post("filter", ext.schedule_args(pod, nodes)).json())


def acknowledge(
    ext: Extender, pod: dict[str, Any], node: str, slots: list[str], phase: str = "Pending"
) -> None:
    """What the watch hands the service when the plugin annotated the bound pod."""
    (row, *_) = ext.built.service.ledger.for_pod(pod["metadata"]["uid"])
    seen = dict(pod)
    uuids = sorted({a.grant.gpu_uuid for a in ext.built.service.ledger.for_pod(row.pod.uid)})
    ann = {**pod["metadata"]["annotations"], ANN_GPU_UUIDS: ",".join(uuids)}
    if slots:
        ann[ANN_ALLOCATED] = ",".join(slots)
    seen["metadata"] = {**pod["metadata"], "annotations": ann}
    seen["status"] = {"phase": phase}
    ext.built.service.acknowledgement(msgspec.convert(seen, Pod), node)


def events(ext: Extender, kind: str) -> list[dict[str, Any]]:
    items = ext.client.get("/v1/events", params={"limit": 1000}).json()["items"]
    return [e for e in items if e["kind"] == kind]


def test_second_gpu_pod_waits_for_the_first_ones_acknowledgement(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        watch_cluster(ext)
        plugin_node(ext, "n1")
        a, b = gpu_pod("a", memory="10Gi"), gpu_pod("b", memory="10Gi")
        assert filtered(ext, a, ["n1"])["NodeNames"] == ["n1"]
        assert bind(ext, "a", "n1") == ""
        ext.clock.advance(3)
        out = filtered(ext, b, ["n1"])
        assert out["NodeNames"] == []
        reason = out["FailedAndUnresolvableNodes"]["n1"]
        assert "ml/a" in reason and "waiting 3s" in reason and "acknowledge" in reason
        assert "ml/a" in bind(ext, "b", "n1")  # a bind racing past filter is refused too
        assert ext.built.service.ledger.for_pod("uid-b") == []

        (row,) = ext.built.service.ledger.for_pod("uid-a")
        slot = f"{row.grant.gpu_uuid}::0"
        acknowledge(ext, a, "n1", [slot])
        (ack,) = events(ext, "acknowledged")  # in the audit API's event trail
        assert ack["pod_uid"] == "uid-a" and ack["node"] == "n1"
        body = json.loads(ack["payload"])
        assert body["slots"] == [slot] and body["gpu_uuids"] == [row.grant.gpu_uuid]
        assert body["pod"] == "ml/a" and body["waited_s"] == 3.0

        assert filtered(ext, b, ["n1"])["NodeNames"] == ["n1"]
        assert bind(ext, "b", "n1") == ""
        acknowledge(ext, a, "n1", [slot])  # the watch shows it again: recorded once
        assert len(events(ext, "acknowledged")) == 1


def test_only_nodes_labelled_for_the_plugin_wait_and_never_standalone(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        plugin_node(ext, "n1")  # labelled, but no cluster watched: no ack could be seen
        for name in ("a", "b"):
            filtered(ext, gpu_pod(name, memory="4Gi"), ["n1"])
            assert bind(ext, name, "n1") == ""
    (tmp_path / "cluster").mkdir()
    with running_extender(tmp_path / "cluster") as ext:
        watch_cluster(ext)
        plugin_node(ext, "n2", label=False)  # the stock plugin's node: no waiting
        for name in ("c", "d"):
            filtered(ext, gpu_pod(name, memory="4Gi"), ["n2"])
            assert bind(ext, name, "n2") == ""
        # CPU-only pods are never held back
        plugin_node(ext, "n3")
        filtered(ext, gpu_pod("e", memory="4Gi"), ["n3"])
        assert bind(ext, "e", "n3") == ""
        assert filtered(ext, gpu_pod("cpu", gpus=0), ["n3"])["NodeNames"] == ["n3"]


def test_deletion_or_failed_bind_ends_the_wait(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        watch_cluster(ext)
        plugin_node(ext, "n1")
        for name in ("a", "b", "c"):
            filtered(ext, gpu_pod(name, memory="4Gi"), ["n1"])
        assert bind(ext, "a", "n1") == ""
        assert bind(ext, "b", "n1") != ""
        ext.built.service.release("uid-a", "deleted")  # the watch saw the pod deleted
        assert bind(ext, "b", "n1") == ""

        class Refusing:
            def bind(self, namespace: str, name: str, uid: str, node: str, ann: dict) -> None:
                raise BindError("pods/binding: 409 Conflict")

        ext.built.service.release("uid-b", "deleted")
        real = ext.built.service.binding.binder
        ext.built.service.binding.binder = Refusing()
        assert "409" in bind(ext, "c", "n1")  # not bound: nothing to wait for
        ext.built.service.binding.binder = real
        filtered(ext, gpu_pod("c", memory="4Gi"), ["n1"])
        assert bind(ext, "c", "n1") == ""


def test_a_wait_past_the_timeout_is_a_discrepancy_and_frees_the_node(tmp_path: Path) -> None:
    with running_extender(tmp_path, ack_timeout=20) as ext:
        watch_cluster(ext)
        plugin_node(ext, "n1")
        a, b = gpu_pod("a", memory="4Gi"), gpu_pod("b", memory="4Gi")
        filtered(ext, a, ["n1"])
        assert bind(ext, "a", "n1") == ""
        ext.clock.advance(15)
        assert ext.built.service.expire_acks() == []
        ext.clock.advance(10)
        (late,) = ext.built.service.expire_acks()
        assert late.pod == "ml/a" and late.node == "n1"
        ext.report("n1")  # the agent keeps reporting (the node is not stale)
        (found,) = ext.client.get("/v1/discrepancies").json()["items"]
        assert found["kind"] == "unacknowledged" and found["pod_uid"] == "uid-a"
        assert "ml/a" in found["detail"] and "20s" in found["detail"]
        # the grant stays held and billed as bound: the pod may still start
        ext.built.service.ledger.flush()
        (row,) = ext.built.service.ledger.for_pod("uid-a")
        assert row.status is Status.BOUND and row.ended_at is None
        assert filtered(ext, b, ["n1"])["NodeNames"] == ["n1"]
        assert bind(ext, "b", "n1") == ""
        acknowledge(ext, a, "n1", [f"{row.grant.gpu_uuid}::0"])  # a late ack is recorded
        (ack,) = events(ext, "acknowledged")
        assert ack["pod_uid"] == "uid-a" and json.loads(ack["payload"])["waited_s"] == 25.0


def test_a_pod_is_pending_until_every_device_is_acknowledged(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        watch_cluster(ext)
        plugin_node(ext, "n1", "4xA10G:24Gi")
        two = gpu_pod("two", gpus=2)
        filtered(ext, two, ["n1"])
        assert bind(ext, "two", "n1") == ""
        uuids = sorted(a.grant.gpu_uuid for a in ext.built.service.ledger.for_pod("uid-two"))
        acknowledge(ext, two, "n1", [f"{uuids[0]}::0"])  # one container of two admitted
        filtered(ext, gpu_pod("next"), ["n1"])
        assert "ml/two" in bind(ext, "next", "n1")
        acknowledge(ext, two, "n1", [f"{uuids[0]}::0", f"{uuids[1]}::0"])
        assert bind(ext, "next", "n1") == ""


def test_after_a_restart_the_watch_finds_the_pending_grant_again(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        watch_cluster(ext)
        plugin_node(ext, "n1")
        a = gpu_pod("a", memory="4Gi")
        filtered(ext, a, ["n1"])
        assert bind(ext, "a", "n1") == ""
    with running_extender(tmp_path) as ext:  # same ledger file: a restarted extender
        watch_cluster(ext)
        plugin_node(ext, "n1")
        acknowledge(ext, a, "n1", [])  # the relist shows it bound, not acknowledged
        out = filtered(ext, gpu_pod("b", memory="4Gi"), ["n1"])
        assert "ml/a" in out["FailedAndUnresolvableNodes"]["n1"]
        (row,) = ext.built.service.ledger.for_pod("uid-a")
        acknowledge(ext, a, "n1", [f"{row.grant.gpu_uuid}::1"])
        assert filtered(ext, gpu_pod("b", memory="4Gi"), ["n1"])["NodeNames"] == ["n1"]
        assert len(events(ext, "acknowledged")) == 1


def test_pods_running_before_the_node_was_labelled_are_not_waited_for(tmp_path: Path) -> None:
    """Rolling the plugin onto a node whose GPU pods the stock plugin admitted: they run
    without ``headroom.dev/allocated`` and hold nothing back (docs/deploy.md)."""
    with running_extender(tmp_path) as ext:
        watch_cluster(ext)
        plugin_node(ext, "n1", label=False)
        old = gpu_pod("old", memory="4Gi")
        filtered(ext, old, ["n1"])
        assert bind(ext, "old", "n1") == ""
        plugin_node(ext, "n1")  # now labelled; the relist shows the pod running
        acknowledge(ext, old, "n1", [], phase="Running")
        filtered(ext, gpu_pod("new", memory="4Gi"), ["n1"])
        assert bind(ext, "new", "n1") == ""
        # a pod bound here but not admitted yet, then seen running without an ack (the
        # stock plugin admitted it during the switch): the wait ends, no ack recorded
        new = gpu_pod("new", memory="4Gi")
        acknowledge(ext, new, "n1", [], phase="Running")
        filtered(ext, gpu_pod("third", memory="4Gi"), ["n1"])
        assert bind(ext, "third", "n1") == ""
        assert events(ext, "acknowledged") == []
