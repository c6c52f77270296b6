"""Fault (d): the Kubernetes API server goes away and comes back (the real kube-apiserver
process is stopped and started again on the same port and etcd). While it is gone,
filter keeps answering from memory and a bind is retried within its deadline and then
fails cleanly (protocol Error, reservation released, ledger row ``failed``, nothing
charged). When it is back the watches reconnect by themselves (a Node created after the
restart reaches the inventory) and the same pod binds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from kubernetes import client as k8s

from drivers.agent.loop import build_report
from drivers.gpu.simulated import SimulatedDriver
from extender.settings import Settings
from extender.simulate.server_thread import ServerThread
from extender.wire.clock import SystemClock
from extender.wiring import Built, build

from .cluster import ControlPlane, Proc, https_get, wait_until

pytestmark = pytest.mark.e2e
TOKEN = "faults-api-token"


def apiserver(plane: ControlPlane) -> Proc:
    return next(p for p in plane.procs if p.name == "kube-apiserver")


def restart_apiserver(plane: ControlPlane) -> None:
    proc = apiserver(plane)
    proc.start()
    ctx = plane.ssl_context()
    wait_until(
        "kube-apiserver /readyz after restart",
        lambda: https_get(f"{plane.server}/readyz", ctx, plane.token)[0] == 200,
        180,
        plane.procs,
    )


@pytest.fixture
def extender(e2e_cluster: ControlPlane, tmp_path: Path) -> Iterator[tuple[str, Built]]:
    (tmp_path / "token").write_text(TOKEN)
    built = build(
        Settings(
            db=str(tmp_path / "l.db"),
            kubeconfig=str(e2e_cluster.kubeconfig),
            agent_token_file=str(tmp_path / "token"),
            stale_after=3600,
        )
    )
    assert built.sync is not None and built.sync.wait_synced(60)
    with ServerThread(built.app) as url:
        yield url, built
    built.sync.close()
    built.service.ledger.close()


def report(url: str, node: str) -> None:
    d = SimulatedDriver("1xA10G:24Gi", seed=1, node=node)
    rep = build_report(d, node, d.attribute, SystemClock())
    httpx.post(
        url + "/v1/reports",
        content=msgspec.json.encode(rep),
        headers={"Authorization": f"Bearer {TOKEN}"},
    ).raise_for_status()


def pod_json(name: str, uid: str, namespace: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "annotations": {"headroom.dev/gpu-memory": "4Gi"},
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


def eventually(cond: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def test_api_server_outage(
    e2e_cluster: ControlPlane,
    k8s_client: k8s.ApiClient,
    namespace: str,
    make_node: Callable[..., str],
    extender: tuple[str, Built],
) -> None:
    url, built = extender
    core = k8s.CoreV1Api(k8s_client)
    node = make_node("faults-api-1")
    report(url, node)
    created = core.create_namespaced_pod(
        namespace,
        # the client validates the dict into a V1Pod; its stubs accept only the model
        {  # type: ignore[arg-type]
            "metadata": {"name": "p1", "annotations": {"headroom.dev/gpu-memory": "4Gi"}},
            "spec": {
                "schedulerName": "nobody",
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ],
            },
        },
    )
    assert created.metadata is not None and created.metadata.uid is not None
    uid = created.metadata.uid
    args = {"Pod": pod_json("p1", uid, namespace), "NodeNames": [node]}
    bind = {"PodName": "p1", "PodNamespace": namespace, "PodUID": uid, "Node": node}

    apiserver(e2e_cluster).stop()
    try:
        assert httpx.post(url + "/filter", json=args).json()["NodeNames"] == [node]
        reply = httpx.post(url + "/bind", json=bind, timeout=30).json()
        assert "API server unreachable" in reply["Error"]
        assert built.service.inventory.grants_of(uid) == []
        rows = built.service.ledger.for_pod(uid)
        assert [r.status for r in rows] == ["failed"]
        assert built.service.ledger.active() == [] or all(
            a.pod.uid != uid for a in built.service.ledger.active()
        )
    finally:
        restart_apiserver(e2e_cluster)

    later = make_node("faults-api-2", instance_type="g5.2xlarge")
    eventually(
        lambda: (
            (f := built.service.inventory.facts(later)) is not None
            and f.instance_type == "g5.2xlarge"
        ),
        "the Node watch to reconnect",
    )
    assert httpx.post(url + "/filter", json=args).json()["NodeNames"] == [node]
    assert httpx.post(url + "/bind", json=bind, timeout=30).json()["Error"] == ""
    bound = core.read_namespaced_pod("p1", namespace)
    assert bound.spec is not None
    assert bound.spec.node_name == node
    assert [g.node for g in built.service.inventory.grants_of(uid)] == [node]
