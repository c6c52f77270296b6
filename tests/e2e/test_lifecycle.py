"""Pod and node lifecycle followed from the real API server, and the Kubernetes binder's
failure paths against it: nothing active, nothing charged after a failed bind."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from extender.kube.binder import KubeBinder
from extender.ledger import open_ledger
from extender.pricing import load_pricebook
from extender.scheduling.binder import BindError
from extender.scheduling.service import SchedulingService
from extender.scoring import policy_by_name
from extender.simulate.server_thread import free_port
from extender.state.inventory import Inventory
from extender.wire.clock import SystemClock
from extender.wire.protocol import ExtenderBindingArgs, args_decoder

from .headroom_proc import Headroom
from .test_scheduling import node_of, pod_body, uid_of, wait_bound

pytestmark = pytest.mark.e2e


def wait_row(h: Headroom, uid: str, ok: Callable[[dict[str, Any]], bool], what: str) -> dict:
    deadline = time.monotonic() + 30
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        rows = h.allocations(pod=uid)
        if rows and all(ok(r) for r in rows):
            return rows[0]
        time.sleep(0.2)
    raise AssertionError(f"{what}: {rows}")


def test_pod_and_node_lifecycle_end_allocations(
    kube_scheduler: Any,
    headroom: Headroom,
    make_node: Any,
    namespace: str,
    k8s_client: k8s.ApiClient,
) -> None:
    core: Any = k8s.CoreV1Api(k8s_client)
    node = make_node("life-od", gpus=4, capacity_type="on-demand", instance_type="g5.xlarge")
    headroom.agent(node, "1xA10G:24Gi")
    kube_scheduler(headroom.url)
    core.create_namespaced_pod(namespace, pod_body("job", "16Gi"))
    uid = uid_of(wait_bound(core, namespace, "job"))

    core.patch_namespaced_pod_status("job", namespace, {"status": {"phase": "Running"}})
    row = wait_row(headroom, uid, lambda r: r["status"] == "running", "not marked running")
    assert row["started_at"] is not None

    core.patch_namespaced_pod_status("job", namespace, {"status": {"phase": "Succeeded"}})
    row = wait_row(headroom, uid, lambda r: r["ended_at"] is not None, "not released")
    assert row["end_reason"] == "succeeded"

    # the 16 GiB came back: a 20 GiB pod now fits on the same 24 GiB GPU
    core.create_namespaced_pod(namespace, pod_body("next", "20Gi"))
    nxt = wait_bound(core, namespace, "next")
    assert node_of(nxt) == node

    core.delete_node(node)  # Karpenter consolidation / spot interruption
    row = wait_row(
        headroom,
        uid_of(nxt),
        lambda r: r["ended_at"] is not None,
        "not released on node deletion",
    )
    assert row["end_reason"] == "node-deleted"

    core.create_namespaced_pod(namespace, pod_body("gone", "1Gi"))
    core.delete_namespaced_pod("gone", namespace, grace_period_seconds=0)


def service_with(binder: Any, tmp_path: Path) -> SchedulingService:
    from drivers.agent.loop import build_report
    from drivers.gpu.simulated import SimulatedDriver

    clock = SystemClock()
    svc = SchedulingService(
        Inventory(load_pricebook()),
        open_ledger(str(tmp_path / "l.db"), clock),
        binder,
        policy_by_name("binpack"),
        clock,
    )
    d = SimulatedDriver("1xA10G:24Gi", node="bind-node", clock=clock)
    svc.report(build_report(d, "bind-node", d.attribute, clock))
    return svc


def filter_then_bind(svc: SchedulingService, pod: Any, node: str = "bind-node") -> str:
    body = {
        "Pod": {
            "metadata": {
                "name": pod.metadata.name,
                "namespace": pod.metadata.namespace,
                "uid": pod.metadata.uid,
                "annotations": pod.metadata.annotations,
            },
            "spec": {
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
            },
        },
        "NodeNames": [node],
    }
    import msgspec

    result, _ = svc.filter(args_decoder.decode(msgspec.json.encode(body)))
    assert result.NodeNames == [node], result
    return svc.bind(
        ExtenderBindingArgs(pod.metadata.name, pod.metadata.namespace, pod.metadata.uid, node)
    ).Error


def assert_nothing_active(svc: SchedulingService, uid: str) -> None:
    assert svc.ledger.active() == []
    assert all(a.status == "failed" for a in svc.ledger.for_pod(uid))
    assert svc.inventory.grants_of(uid) == []


def test_the_binding_carries_the_grant_and_only_binds_the_pod_it_names(
    k8s_client: k8s.ApiClient, make_node: Any, namespace: str
) -> None:
    """KubeBinder's own POST of the Binding (not the generated client): the grant lands
    on the pod with the node, and a pod replaced under the same name is not bound."""
    core: Any = k8s.CoreV1Api(k8s_client)
    make_node("grant-node", gpus=4, capacity_type="on-demand", instance_type="g5.xlarge")
    binder = KubeBinder(k8s_client)
    grant = {"headroom.dev/gpu-uuids": "GPU-a,GPU-b", "headroom.dev/gpu-memory-mib": "8192"}

    pod = core.create_namespaced_pod(namespace, pod_body("carries-grant", "8Gi"))
    binder.bind(namespace, "carries-grant", pod.metadata.uid, "grant-node", grant)
    bound = core.read_namespaced_pod("carries-grant", namespace)
    assert bound.spec.node_name == "grant-node"
    assert {k: bound.metadata.annotations.get(k) for k in grant} == grant

    # the UID is a precondition: the name now belongs to another pod, which stays pending
    old = core.create_namespaced_pod(namespace, pod_body("replaced", "8Gi"))
    core.delete_namespaced_pod("replaced", namespace, grace_period_seconds=0)
    core.create_namespaced_pod(namespace, pod_body("replaced", "8Gi"))
    with pytest.raises(BindError, match="replaced"):
        binder.bind(namespace, "replaced", old.metadata.uid, "grant-node", grant)
    assert core.read_namespaced_pod("replaced", namespace).spec.node_name is None


def test_binder_failures_leave_nothing_active(
    k8s_client: k8s.ApiClient,
    make_node: Any,
    namespace: str,
    e2e_cluster: Any,
    tmp_path: Path,
) -> None:
    core: Any = k8s.CoreV1Api(k8s_client)
    make_node("bind-node", gpus=4, capacity_type="on-demand", instance_type="g5.xlarge")
    make_node("other-node", gpus=4, capacity_type="on-demand", instance_type="g5.xlarge")
    svc = service_with(KubeBinder(k8s_client), tmp_path)

    # pod deleted while binding
    gone = core.create_namespaced_pod(namespace, pod_body("deleted-mid-bind", "8Gi"))
    core.delete_namespaced_pod("deleted-mid-bind", namespace, grace_period_seconds=0)
    err = filter_then_bind(svc, gone)
    assert "no longer exists" in err, err
    assert_nothing_active(svc, gone.metadata.uid)

    # 409: someone else bound it to another node first
    taken = core.create_namespaced_pod(namespace, pod_body("bound-elsewhere", "8Gi"))
    core.create_namespaced_pod_binding(
        "bound-elsewhere",
        namespace,
        {
            "metadata": {"name": "bound-elsewhere"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "other-node"},
        },
        _preload_content=False,
    )
    err = filter_then_bind(svc, taken)
    assert "409" in err, err
    assert_nothing_active(svc, taken.metadata.uid)

    # the same pod bound again to the node it is on: idempotent success
    ok = core.create_namespaced_pod(namespace, pod_body("bind-twice", "8Gi"))
    assert filter_then_bind(svc, ok) == ""
    # bind returns None; a failure raises BindError
    KubeBinder(k8s_client).bind(namespace, "bind-twice", ok.metadata.uid, "bind-node", {})
    assert core.read_namespaced_pod("bind-twice", namespace).spec.node_name == "bind-node"

    # API server unreachable: retried within the deadline, then a clean Error
    dead = yaml.safe_load(Path(e2e_cluster.kubeconfig).read_text())
    dead["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    dead_path = tmp_path / "dead-kubeconfig"
    dead_path.write_text(yaml.safe_dump(dead))
    (tmp_path / "down").mkdir()
    down = service_with(
        KubeBinder(k8s_config.new_client_from_config(str(dead_path)), deadline_s=1.0),
        tmp_path / "down",
    )
    lost = core.create_namespaced_pod(namespace, pod_body("api-down", "8Gi"))
    err = filter_then_bind(down, lost)
    assert "API server unreachable" in err, err
    assert_nothing_active(down, lost.metadata.uid)
