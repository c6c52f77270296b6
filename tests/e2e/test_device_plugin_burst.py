"""The whole chain under load: a burst of GPU pods through the real kube-scheduler,
``headroom serve`` (filter, bind, ledger), kubelet's own device manager (the Go harness,
one per node) and ``headroom device-plugin`` on four nodes.

What a user relies on: every container is started with exactly the GPUs and memory limit
the ledger granted (kubelet's own device ids name the same GPUs), no slot is handed out
twice, no GPU is granted more memory than it has, and no admission is refused, because
the extender binds no second GPU pod to a node while the plugin has not acknowledged
the first (tests/test_acks.py is the rule alone). Then on one node: a pod deleted between
its bind and its admission ends the wait and leaves nothing held, and a plugin restart
followed by a kubelet restart gives every running container the same answer again.
"""

from __future__ import annotations

import json
import shutil
import ssl
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import dynamic

from extender.state.nodefacts import DEVICE_PLUGIN
from extender.wire.annotations import ANN_REQUEUED, ANN_UNACKNOWLEDGED
from tests.test_manifests import BUILD_KUSTOMIZE, built, go_tool

from .headroom_proc import Headroom
from .kubelet_proc import Kubelet, Plugin, wait_for
from .test_device_plugin import given, harness  # noqa: F401 (harness: the build fixture)
from .test_scheduling import pod_body, uid_of, wait_bound

pytestmark = pytest.mark.e2e

SPEC = "4xA10G:24Gi"
SLOTS = 8  # > the most 3 GiB pods one 24 GiB GPU holds (7): memory, not slots, limits
NODES = 4
# 60 pods, 258 GiB of the four nodes' 376 GiB usable (24 GiB less the 512 MiB margin);
# the two-GPU pods first, while whole pairs of GPUs still have room
SIZES = (
    [("3Gi", 2)] * 6 + [("3Gi", 1)] * 30 + [("4Gi", 1)] * 12 + [("6Gi", 1)] * 6 + [("8Gi", 1)] * 6
)
TIMEOUT_S = 240


def node_pod(name: str, memory: str, node: str) -> dict[str, Any]:
    body = pod_body(name, memory)
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return body


def events(url: str, kind: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = httpx.get(url + "/v1/events", params=params, timeout=10).json()
        out += [e for e in page["items"] if e["kind"] == kind]
        cursor = page["next_cursor"]
        if not cursor:
            return out


def check_exact(headroom: Headroom, admission: dict[str, Any], uid: str) -> list[str]:
    """The container got exactly the ledger's grant; returns its slot ids."""
    got = given(admission)
    rows = headroom.allocations(pod=uid)
    gpus = [g for g in got["envs"]["NVIDIA_VISIBLE_DEVICES"].split(",") if g]
    assert sorted(gpus) == sorted(r["gpu_uuid"] for r in rows), (admission["pod"], rows)
    (mib,) = {r["memory_mib"] for r in rows}  # one slice size on every granted GPU
    assert got["envs"] == {
        "NVIDIA_VISIBLE_DEVICES": ",".join(gpus),
        **{f"CUDA_DEVICE_MEMORY_LIMIT_{i}": f"{mib}m" for i in range(len(gpus))},
    }
    assert got["cdi"] == [f"nvidia.com/gpu={g}" for g in gpus]
    assert sorted(i.split("::")[0] for i in got["ids"]) == sorted(gpus)  # kubelet's own view
    return list(got["ids"])


def wait_message(core: Any, ns: str, name: str, text: str, timeout: float = 60) -> str:
    last = ""

    def has() -> bool:
        nonlocal last
        pod = core.read_namespaced_pod(name, ns)
        for c in pod.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False" and c.message:
                last = str(c.message)
        return text in last

    wait_for(has, f"{ns}/{name} unschedulable with {text!r} (last: {last!r})", timeout)
    return last


def test_a_burst_of_sixty_pods_gets_exactly_the_ledgers_gpus(
    harness: Path,  # noqa: F811
    e2e_cluster: Any,
    k8s_client: k8s.ApiClient,
    kube_scheduler: Any,
    make_node: Any,
    namespace: str,
    tmp_path: Path,
) -> None:
    core: Any = k8s.CoreV1Api(k8s_client)
    headroom = Headroom(tmp_path, e2e_cluster.kubeconfig, policy="headroom")
    dirs = [Path(tempfile.mkdtemp(prefix="kdm", dir="/tmp")) for _ in range(NODES)]
    nodes = [
        make_node(
            f"burst-{i}",
            gpus=4 * SLOTS,  # kubelet's allocatable: GPUs x slots, as the plugin advertises
            capacity_type="on-demand",
            extra_labels={DEVICE_PLUGIN: "true"},
        )
        for i in range(NODES)
    ]
    kubelets = {
        n: Kubelet(harness, d / "device-plugins", e2e_cluster.kubeconfig, n, tmp_path)
        for n, d in zip(nodes, dirs, strict=True)
    }
    plugins = {
        n: Plugin(d, e2e_cluster.kubeconfig, n, SPEC, tmp_path, slots=SLOTS)
        for n, d in zip(nodes, dirs, strict=True)
    }
    headroom.start()
    try:
        for n in nodes:
            headroom.agent(n, SPEC)  # same seed and node as the plugin: same UUIDs
            kubelets[n].start()
            plugins[n].start()
        for n in nodes:
            plugins[n].wait_registered()
        kube_scheduler(headroom.url)
        names = [f"p{i:02d}" for i in range(len(SIZES))]
        for name, (memory, gpus) in zip(names, SIZES, strict=True):
            body = pod_body(name, memory, gpus=gpus)
            core.create_namespaced_pod(namespace, body)

        admitted: dict[str, dict[str, Any]] = {}

        def all_admitted() -> bool:
            admitted.clear()
            for n in nodes:
                for a in kubelets[n].admissions():
                    admitted.setdefault(a["pod"], {**a, "node": n})
            return len(admitted) == len(names)

        wait_for(all_admitted, f"{len(names)} admissions", TIMEOUT_S)
        refused = [a for a in admitted.values() if not a["admitted"]]
        assert not refused, refused  # the ack rule: kubelet never had to guess
        slots: dict[str, list[str]] = defaultdict(list)
        uids: dict[str, str] = {}
        for name in names:
            pod = core.read_namespaced_pod(name, namespace)
            uids[name] = uid_of(pod)
            a = admitted[f"{namespace}/{name}"]
            assert a["node"] == pod.spec.node_name
            slots[a["node"]] += check_exact(headroom, a, uids[name])
        for n, ids in slots.items():
            assert len(ids) == len(set(ids)), f"a slot of {n} handed out twice"
        # no GPU over-granted: the ledger's active grants per GPU within its memory
        per_gpu: Counter[str] = Counter()
        for r in headroom.allocations(active="true"):
            per_gpu[r["gpu_uuid"]] += r["memory_mib"]
        assert per_gpu and max(per_gpu.values()) <= 24576, per_gpu
        # the plugin's acknowledgement of each grant is in the ledger's event trail
        acks = events(headroom.url, "acknowledged")
        assert sorted(e["pod_uid"] for e in acks) == sorted(uids.values())
        for e in acks:
            body = json.loads(e["payload"])
            name = body["pod"].split("/")[1]
            assert (
                sorted(body["slots"])
                == admitted[body["pod"]]["containers"][0]["devices"]["nvidia.com/gpu"]
            ), name

        # --- one node: deletion between bind and admission, plugin + kubelet restart
        node = nodes[0]
        mine = sorted(n for n in names if admitted[f"{namespace}/{n}"]["node"] == node)
        keep, drop = mine[:2], mine[2:]
        for name in drop:  # room for the pods below
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        wait_for(
            lambda: not any(headroom.allocations(pod=uids[n], active="true") for n in drop),
            "the deleted pods' grants ended",
        )
        before = {n: given(admitted[f"{namespace}/{n}"]) for n in keep}
        seen = len(kubelets[node].admissions())
        kubelets[node].stop()
        plugins[node].stop()
        core.create_namespaced_pod(namespace, node_pod("gone", "8Gi", node))
        gone_uid = uid_of(wait_bound(core, namespace, "gone"))
        core.create_namespaced_pod(namespace, node_pod("next", "8Gi", node))
        msg = wait_message(core, namespace, "next", f"acknowledge pod {namespace}/gone")
        assert "waiting" in msg
        core.delete_namespaced_pod("gone", namespace, grace_period_seconds=0)
        # kube-scheduler may retry "next" on the deletion before the extender has seen it
        # and be refused again; the extender annotates "next" once the node no longer
        # waits for "gone" (a pod update), and kube-scheduler tries it once more
        next_uid = uid_of(wait_bound(core, namespace, "next"))
        wait_for(
            lambda: (
                ANN_REQUEUED
                in (core.read_namespaced_pod("next", namespace).metadata.annotations or {})
            ),
            "the refused pod nudged once the node no longer waits for gone",
        )
        (gone_row,) = headroom.allocations(pod=gone_uid)
        assert gone_row["ended_at"] is not None, gone_row  # nothing of it is held
        plugins[node].start()  # the plugin restarts, then kubelet does
        kubelets[node].start()
        plugins[node].wait_registered()
        for name in keep:  # running containers are re-Allocated the same answer
            again = given(kubelets[node].admission(f"{namespace}/{name}", after=seen))
            assert again == before[name], name
        check_exact(headroom, kubelets[node].admission(f"{namespace}/next", after=seen), next_uid)
        assert not [a for a in kubelets[node].admissions()[seen:] if a["pod"].endswith("/gone")]
        wait_for(
            lambda: next_uid in {e["pod_uid"] for e in events(headroom.url, "acknowledged")},
            "the ack of the pod admitted after the restarts",
        )
    finally:
        for n in nodes:
            plugins[n].stop()
            kubelets[n].stop()
        headroom.stop()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


def test_the_real_api_server_accepts_the_device_plugin_manifests(
    k8s_client: k8s.ApiClient,
) -> None:
    """Server-side dry run (admission and the API's own validation, nothing stored) of
    what manifests/device-plugin deploys."""
    kustomize = go_tool(BUILD_KUSTOMIZE)
    dyn = dynamic.DynamicClient(k8s_client)
    core: Any = k8s.CoreV1Api(k8s_client)
    try:
        core.create_namespace({"metadata": {"name": "headroom-system"}})
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
    docs = built(kustomize, "device-plugin")
    assert {d["kind"] for d in docs} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "DaemonSet",
    }
    for doc in docs:
        api = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        ns = doc["metadata"].get("namespace")
        made = api.create(body=doc, namespace=ns, dry_run="All", field_validation="Strict")
        assert made.metadata.name == doc["metadata"]["name"]


def test_a_grant_never_acknowledged_frees_its_node_after_the_timeout(
    e2e_cluster: Any,
    k8s_client: k8s.ApiClient,
    kube_scheduler: Any,
    make_node: Any,
    namespace: str,
    tmp_path: Path,
) -> None:
    """No plugin answers on this node (down, or kubelet not admitting): after
    --ack-timeout the grant is an `unacknowledged` discrepancy, the pod is annotated
    (the event that makes kube-scheduler retry the pods refused meanwhile) and the next
    pod is bound, without waiting for the scheduler's 5-minute requeue."""
    core: Any = k8s.CoreV1Api(k8s_client)
    node = make_node(
        "ack-timeout", gpus=8, capacity_type="on-demand", extra_labels={DEVICE_PLUGIN: "true"}
    )
    headroom = Headroom(tmp_path, e2e_cluster.kubeconfig)
    headroom.extra += ["--ack-timeout", "5"]
    headroom.start()
    try:
        headroom.agent(node, "2xA10G:24Gi")
        kube_scheduler(headroom.url)
        core.create_namespaced_pod(namespace, node_pod("first", "4Gi", node))
        first = uid_of(wait_bound(core, namespace, "first"))
        core.create_namespaced_pod(namespace, node_pod("second", "4Gi", node))
        wait_message(core, namespace, "second", f"acknowledge pod {namespace}/first")
        wait_bound(core, namespace, "second", timeout=60)
        ann = core.read_namespaced_pod("first", namespace).metadata.annotations
        assert ANN_UNACKNOWLEDGED in ann
        found = httpx.get(headroom.url + "/v1/discrepancies", timeout=10).json()["items"]
        (late,) = [d for d in found if d["pod_uid"] == first]
        assert late["kind"] == "unacknowledged" and late["node"] == node
        (row,) = headroom.allocations(pod=first)
        assert row["ended_at"] is None  # still held: the pod may yet start
    finally:
        headroom.stop()


def test_the_plugin_may_patch_only_its_own_nodes_pods_and_only_its_annotation(
    e2e_cluster: Any,
    k8s_client: k8s.ApiClient,
    make_node: Any,
    namespace: str,
) -> None:
    """manifests/device-plugin's RBAC and ValidatingAdmissionPolicy, applied to the real
    API server; the plugin's ServiceAccount is impersonated with the node its token would
    carry (``authentication.kubernetes.io/node-name``)."""
    kustomize = go_tool(BUILD_KUSTOMIZE)
    dyn = dynamic.DynamicClient(k8s_client)
    core: Any = k8s.CoreV1Api(k8s_client)
    try:
        core.create_namespace({"metadata": {"name": "headroom-system"}})
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
    docs = [d for d in built(kustomize, "device-plugin") if d["kind"] != "DaemonSet"]
    made = []
    for doc in docs:
        api = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        ns = doc["metadata"].get("namespace")
        try:
            api.create(body=doc, namespace=ns)
            made.append((api, doc["metadata"]["name"], ns))
        except k8s.ApiException as exc:
            if exc.status != 409:
                raise
    a, b = make_node("vap-a"), make_node("vap-b")
    for name, node in (("on-a", a), ("on-b", b)):
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": name, "annotations": {"headroom.dev/gpu-uuids": "GPU-1"}},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        )
    cfg = yaml_config(e2e_cluster.kubeconfig)
    trust = ssl.create_default_context(cafile=cfg["ca"])  # httpx deprecates verify=<path>

    def as_plugin(node: str | None, pod: str, patch: dict[str, Any]) -> httpx.Response:
        headers = {
            "Authorization": f"Bearer {cfg['token']}",
            "Content-Type": "application/strategic-merge-patch+json",
            "Impersonate-User": "system:serviceaccount:headroom-system:headroom-device-plugin",
            "Impersonate-Group": "system:serviceaccounts",
        }
        if node is not None:
            headers["Impersonate-Extra-authentication.kubernetes.io%2fnode-name"] = node
        url = f"{cfg['server']}/api/v1/namespaces/{namespace}/pods/{pod}"
        return httpx.patch(url, json=patch, headers=headers, verify=trust, timeout=10)

    ack = {"metadata": {"annotations": {"headroom.dev/allocated": "GPU-1::0"}}}
    try:
        # the policy takes effect within a second or two of its creation
        wait_for(
            lambda: as_plugin(a, "on-b", ack).status_code == 403,
            "the policy refusing another node's pod",
        )
        refused = as_plugin(a, "on-b", ack)
        assert f"device plugin on node {a} may acknowledge only pods" in refused.text
        nonode = as_plugin(None, "on-a", ack)  # a token without a node
        assert nonode.status_code == 403, nonode.text
        ok = as_plugin(a, "on-a", ack)
        assert ok.status_code == 200, ok.text
        ann = core.read_namespaced_pod("on-a", namespace).metadata.annotations
        assert ann["headroom.dev/allocated"] == "GPU-1::0"
        for patch in (
            {"metadata": {"annotations": {"headroom.dev/gpu-uuids": "GPU-2"}}},
            {"metadata": {"annotations": {"headroom.dev/gpu-uuids": None}}},
            {"metadata": {"labels": {"x": "y"}}},
            {"spec": {"activeDeadlineSeconds": 5}},
        ):
            r = as_plugin(a, "on-a", patch)
            assert r.status_code == 403 and "only the annotation" in r.text, (patch, r.text)
        # what RBAC alone grants: nothing but pods (list, patch)
        nodes = httpx.get(
            f"{cfg['server']}/api/v1/nodes",
            headers={
                "Authorization": f"Bearer {cfg['token']}",
                "Impersonate-User": "system:serviceaccount:headroom-system:headroom-device-plugin",
            },
            verify=trust,
            timeout=10,
        )
        assert nodes.status_code == 403
    finally:
        for api, name, ns in made:
            api.delete(name=name, namespace=ns)


def yaml_config(kubeconfig: Path) -> dict[str, str]:
    """The e2e kubeconfig's server, CA file and admin token."""
    doc = yaml.safe_load(Path(kubeconfig).read_text())
    cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
    return {
        "server": cluster["server"],
        "ca": cluster["certificate-authority"],
        "token": user["token"],
    }
