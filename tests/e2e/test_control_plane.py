"""The real control plane, with no headroom code: API surface, plain scheduling, and the
extender wire protocol as kube-scheduler really speaks it.

The extender test captures the JSON bodies kube-scheduler sends and keeps one of each in
tests/fixtures/scheduler_requests/ (written when missing, or always with
HEADROOM_E2E_UPDATE_FIXTURES=1; otherwise their key sets are checked against the
captured traffic, so a protocol change in a new Kubernetes release shows up here).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from .cluster import REPO_ROOT, ControlPlane, Scheduler, render_scheduler_config

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "scheduler_requests"
GPU_MEMORY_ANNOTATION = "headroom.dev/gpu-memory"


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def gpu_pod(name: str, *, priority_class: str | None = None) -> Any:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "train",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {
                    "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"},
                    "limits": {"nvidia.com/gpu": "1"},
                },
            }
        ],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "metadata": {
            "name": name,
            "labels": {"app": "e2e"},
            "annotations": {GPU_MEMORY_ANNOTATION: "20Gi"},
        },
        "spec": spec,
    }


def node_of(core: Any, ns: str, pod: str) -> str | None:
    return core.read_namespaced_pod(pod, ns).spec.node_name


def nominated_node(core: Any, ns: str, pod: str) -> str | None:
    return core.read_namespaced_pod(pod, ns).status.nominated_node_name


# --------------------------------------------------------------------------- (a) API


def test_apiserver_serves_dra_v1(e2e_cluster: ControlPlane, k8s_client: k8s.ApiClient) -> None:
    e2e_cluster.check_alive()
    version: Any = k8s.VersionApi(k8s_client).get_code()
    assert version.git_version.startswith("v1.37."), version.git_version

    groups: Any = k8s.ApisApi(k8s_client).get_api_versions()
    resource_group = next(g for g in groups.groups if g.name == "resource.k8s.io")
    assert "v1" in [v.version for v in resource_group.versions]
    assert resource_group.preferred_version.version == "v1"

    res: Any = k8s.ResourceV1Api(k8s_client).get_api_resources()
    names = {r.name for r in res.resources}
    assert {"resourceslices", "resourceclaims", "resourceclaimtemplates", "deviceclasses"} <= names

    # The beta DRA gates the harness turns on must reach the API: a consumable-capacity
    # device (allowMultipleAllocations) and a partitionable one (sharedCounters +
    # consumesCounters) are kept, not silently dropped.
    api: Any = k8s.ResourceV1Api(k8s_client)
    name = "e2e-dra-gates"
    counters = {
        "metadata": {"name": f"{name}-counters"},
        "spec": {
            "driver": "gpu.e2e.headroom.dev",
            "nodeName": "no-such-node",
            "pool": {"name": "p0", "generation": 1, "resourceSliceCount": 2},
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
        },
    }
    devices = {
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.e2e.headroom.dev",
            "nodeName": "no-such-node",
            "pool": {"name": "p0", "generation": 1, "resourceSliceCount": 2},
            "devices": [
                {
                    "name": "gpu-0",
                    "allowMultipleAllocations": True,
                    "capacity": {"memory": {"value": "80Gi"}},
                    "consumesCounters": [
                        {"counterSet": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}
                    ],
                }
            ],
        },
    }
    try:
        api.create_resource_slice(counters)
        api.create_resource_slice(devices)
        got = api.read_resource_slice(name)
        dev = got.spec.devices[0]
        assert dev.allow_multiple_allocations is True
        assert dev.consumes_counters and dev.consumes_counters[0].counter_set == "gpu-0"
        assert api.read_resource_slice(f"{name}-counters").spec.shared_counters
    finally:
        for n in (name, f"{name}-counters"):
            try:
                api.delete_resource_slice(n)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    dc = {"metadata": {"name": "e2e.gpu.headroom.dev"}, "spec": {"selectors": []}}
    api.create_device_class(dc)
    api.delete_device_class("e2e.gpu.headroom.dev")


# ---------------------------------------------------------------- (b) plain scheduling


def test_scheduler_binds_pod_without_extender(
    k8s_client: k8s.ApiClient,
    kube_scheduler: Callable[[str | None], Scheduler],
    make_node: Callable[..., str],
    namespace: str,
) -> None:
    sched = kube_scheduler(None)
    assert sched.config_path is not None
    assert "extenders: []" in sched.config_path.read_text()
    node = make_node("e2e-b-node", capacity_type="spot", instance_type="g5.xlarge")
    core: Any = k8s.CoreV1Api(k8s_client)
    core.create_namespaced_pod(namespace, gpu_pod("plain"))
    assert wait_for("pod bound", lambda: node_of(core, namespace, "plain")) == node


# ------------------------------------------------------------ (c) extender round trip


@dataclass
class RecordingExtender:
    """A minimal, correct extender: passes every node, prefers ``favourite``, binds.

    Records every (verb, body) the scheduler sends.
    """

    api: k8s.ApiClient
    favourite: str = ""
    # Called with the bind request before the Binding is created (e.g. to look at claims).
    on_bind: Callable[[dict[str, Any]], None] | None = None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def verbs_for(self, pod: str) -> list[str]:
        with self.lock:
            return [v for v, body in self.calls if pod_name(body) == pod]

    def body(self, verb: str, pod: str) -> dict[str, Any]:
        with self.lock:
            return next(b for v, b in self.calls if v == verb and pod_name(b) == pod)

    def handle(self, verb: str, body: dict[str, Any]) -> Any:
        if verb == "filter":
            return {
                "NodeNames": body["NodeNames"],
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": "",
            }
        if verb == "prioritize":
            return [
                {"Host": n, "Score": 10 if n == self.favourite else 0} for n in body["NodeNames"]
            ]
        if verb == "bind":
            if self.on_bind is not None:
                self.on_bind(body)
            binding = {
                "metadata": {"name": body["PodName"], "uid": body["PodUID"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": body["Node"]},
            }
            try:
                # The generated client cannot decode the Status the API returns here.
                core: Any = k8s.CoreV1Api(self.api)
                core.create_namespaced_binding(
                    body["PodNamespace"], binding, _preload_content=False
                )
            except ApiException as exc:
                return {"Error": f"binding failed: {exc.status} {exc.reason}"}
            return {"Error": ""}
        if verb == "preempt":
            return {"NodeNameToMetaVictims": body.get("NodeNameToMetaVictims") or {}}
        raise ValueError(verb)

    def __enter__(self) -> RecordingExtender:
        ext = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                verb = self.path.rstrip("/").rsplit("/", 1)[-1]
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = json.loads(raw)
                with ext.lock:
                    ext.calls.append((verb, body))
                try:
                    out, status = json.dumps(ext.handle(verb, body)).encode(), 200
                except ValueError:
                    out, status = b'{"Error": "unknown verb"}', 404
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def pod_name(body: dict[str, Any]) -> str | None:
    if "PodName" in body:
        return str(body["PodName"])
    pod = body.get("Pod") or {}
    name = pod.get("metadata", {}).get("name")
    return str(name) if name else None


@pytest.fixture
def extender(k8s_client: k8s.ApiClient) -> Iterator[RecordingExtender]:
    with RecordingExtender(k8s_client) as ext:
        yield ext


def keep_fixture(verb: str, body: dict[str, Any]) -> None:
    """Write the captured body once (or on request); otherwise check its shape still holds."""
    path = FIXTURES / f"{verb}.json"
    if os.environ.get("HEADROOM_E2E_UPDATE_FIXTURES") == "1" or not path.exists():
        FIXTURES.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(body, indent=2) + "\n")
        return
    kept = json.loads(path.read_text())
    assert set(kept) == set(body), f"{verb} request keys changed: {set(kept)} != {set(body)}"


def test_scheduler_calls_extender_filter_prioritize_bind(
    k8s_client: k8s.ApiClient,
    kube_scheduler: Callable[[str | None], Scheduler],
    make_node: Callable[..., str],
    namespace: str,
    extender: RecordingExtender,
) -> None:
    nodes = [
        make_node("e2e-c-node-a", capacity_type="spot", instance_type="g5.xlarge"),
        make_node("e2e-c-node-b", capacity_type="on-demand", instance_type="g5.2xlarge"),
        make_node("e2e-c-node-c", capacity_type="spot", instance_type="g6.xlarge"),
    ]
    extender.favourite = "e2e-c-node-b"
    sched = kube_scheduler(extender.url)
    assert sched.config_path is not None
    assert sched.config_path.read_text() == render_scheduler_config(
        sched.plane.kubeconfig, extender.url
    )

    core: Any = k8s.CoreV1Api(k8s_client)
    core.create_namespaced_pod(namespace, gpu_pod("gpu-job"))
    assert wait_for("pod bound", lambda: node_of(core, namespace, "gpu-job")) == "e2e-c-node-b"

    assert extender.verbs_for("gpu-job") == ["filter", "prioritize", "bind"]
    filt = extender.body("filter", "gpu-job")
    prio = extender.body("prioritize", "gpu-job")
    bind = extender.body("bind", "gpu-job")

    # nodeCacheCapable=true: names only, Nodes sent as null (docs/protocol.md §1.1).
    assert set(filt) == {"Pod", "Nodes", "NodeNames"}
    assert filt["Nodes"] is None
    assert set(nodes) <= set(filt["NodeNames"])
    assert filt["Pod"]["metadata"]["annotations"][GPU_MEMORY_ANNOTATION] == "20Gi"
    assert filt["Pod"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert set(nodes) <= set(prio["NodeNames"])
    uid = core.read_namespaced_pod("gpu-job", namespace).metadata.uid
    assert bind == {
        "PodName": "gpu-job",
        "PodNamespace": namespace,
        "PodUID": uid,
        "Node": "e2e-c-node-b",
    }
    keep_fixture("filter", filt)
    keep_fixture("prioritize", prio)
    keep_fixture("bind", bind)


# ------------------------------------------------------------------ (d) preemption


def test_scheduler_calls_extender_preempt(
    k8s_client: k8s.ApiClient,
    kube_scheduler: Callable[[str | None], Scheduler],
    make_node: Callable[..., str],
    namespace: str,
    extender: RecordingExtender,
) -> None:
    sched_api: Any = k8s.SchedulingV1Api(k8s_client)
    classes = {"e2e-low": 10, "e2e-high": 1000}
    for name, value in classes.items():
        try:
            sched_api.create_priority_class({"metadata": {"name": name}, "value": value})
        except ApiException as exc:
            if exc.status != 409:
                raise
    node = make_node("e2e-d-node", capacity_type="spot", instance_type="g5.xlarge")
    kube_scheduler(extender.url)
    core: Any = k8s.CoreV1Api(k8s_client)

    core.create_namespaced_pod(namespace, gpu_pod("victim", priority_class="e2e-low"))
    assert wait_for("victim bound", lambda: node_of(core, namespace, "victim")) == node
    victim = core.read_namespaced_pod("victim", namespace)
    victim_uid = victim.metadata.uid

    # Every other node in the cluster is someone else's; keep the preemptor on ours.
    preemptor = gpu_pod("preemptor", priority_class="e2e-high")
    preemptor["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    core.create_namespaced_pod(namespace, preemptor)

    wait_for("preempt call", lambda: "preempt" in extender.verbs_for("preemptor"), 90)
    body = extender.body("preempt", "preemptor")
    # nodeCacheCapable=true: the Meta form (UIDs only), full victims sent as null.
    assert set(body) == {"Pod", "NodeNameToVictims", "NodeNameToMetaVictims"}
    assert body["NodeNameToVictims"] is None
    assert body["NodeNameToMetaVictims"] == {
        node: {"Pods": [{"UID": victim_uid}], "NumPDBViolations": 0}
    }

    def victim_evicted() -> bool:
        try:
            pod = core.read_namespaced_pod("victim", namespace)
        except ApiException as exc:
            return exc.status == 404
        return pod.metadata.deletion_timestamp is not None

    wait_for("victim deleted by the scheduler", victim_evicted, 60)
    wait_for(
        "preemptor nominated",
        lambda: nominated_node(core, namespace, "preemptor") == node,
        60,
    )
    keep_fixture("preempt", body)
    for name in classes:
        try:
            sched_api.delete_priority_class(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


# ------------------------------------------------------- (e) DRA claim + extender bind

DRA_DRIVER = "gpu.e2e.headroom.dev"


def dra_slice(node: str) -> dict[str, Any]:
    """One shareable GPU (DRAConsumableCapacity) with 80Gi of consumable memory."""
    return {
        "metadata": {"name": f"{node}-{DRA_DRIVER}"},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "allowMultipleAllocations": True,
                    "attributes": {"productName": {"string": "NVIDIA A10G"}},
                    "capacity": {"memory": {"value": "80Gi"}},
                }
            ],
        },
    }


def test_dra_claim_allocated_before_extender_bind(
    k8s_client: k8s.ApiClient,
    kube_scheduler: Callable[[str | None], Scheduler],
    make_node: Callable[..., str],
    namespace: str,
    extender: RecordingExtender,
) -> None:
    core: Any = k8s.CoreV1Api(k8s_client)
    res: Any = k8s.ResourceV1Api(k8s_client)
    with_slices = [make_node("e2e-e-node-a"), make_node("e2e-e-node-b")]
    make_node("e2e-e-node-c")  # no ResourceSlice: DRA's in-tree Filter must drop it
    for node in with_slices:
        res.create_resource_slice(dra_slice(node))
    dc_name = "e2e-gpu.headroom.dev"
    res.create_device_class(
        {
            "metadata": {"name": dc_name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]},
        }
    )
    # No kube-controller-manager, so no claims from templates: a plain ResourceClaim.
    res.create_namespaced_resource_claim(
        namespace,
        {
            "metadata": {"name": "gpu-20g"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": dc_name,
                                "capacity": {"requests": {"memory": "20Gi"}},
                            },
                        }
                    ]
                }
            },
        },
    )
    seen_at_bind: list[Any] = []
    extender.on_bind = lambda body: seen_at_bind.append(
        res.read_namespaced_resource_claim("gpu-20g", body["PodNamespace"]).status
    )
    extender.favourite = "e2e-e-node-b"
    kube_scheduler(extender.url)
    pod = {
        "metadata": {"name": "dra-job", "annotations": {GPU_MEMORY_ANNOTATION: "20Gi"}},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-20g"}],
            "containers": [
                {
                    "name": "train",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }
    try:
        core.create_namespaced_pod(namespace, pod)
        node = wait_for("DRA pod bound", lambda: node_of(core, namespace, "dra-job"))
        assert node == "e2e-e-node-b"

        # The extender saw only nodes that passed DRA's in-tree Filter.
        filt = extender.body("filter", "dra-job")
        assert sorted(filt["NodeNames"]) == sorted(with_slices)
        assert filt["Pod"]["spec"]["resourceClaims"] == [
            {"name": "gpu", "resourceClaimName": "gpu-20g"}
        ]
        assert extender.verbs_for("dra-job") == ["filter", "prioritize", "bind"]

        # PreBind wrote the allocation before the extender's bind was called.
        assert len(seen_at_bind) == 1 and seen_at_bind[0].allocation is not None
        claim = res.read_namespaced_resource_claim("gpu-20g", namespace)
        (result,) = claim.status.allocation.devices.results
        assert (result.driver, result.pool, result.device) == (DRA_DRIVER, node, "gpu-0")
        assert result.consumed_capacity == {"memory": "20Gi"}
        assert result.share_id
        assert [r.name for r in claim.status.reserved_for] == ["dra-job"]
        keep_fixture("filter_dra", filt)
        keep_fixture("bind_dra", extender.body("bind", "dra-job"))
        raw = res.read_namespaced_resource_claim("gpu-20g", namespace, _preload_content=False)
        keep_fixture("claim_dra_allocated", json.loads(raw.data))  # as served, not re-encoded
    finally:
        core.delete_namespaced_pod("dra-job", namespace, grace_period_seconds=0)
        res.delete_namespaced_resource_claim("gpu-20g", namespace)
        for node in with_slices:
            res.delete_resource_slice(f"{node}-{DRA_DRIVER}")
        res.delete_device_class(dc_name)
