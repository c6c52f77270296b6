"""Karpenter signals from the real API server: a NodeClaim being deleted takes its node
out of GPU scheduling (Karpenter's CRD is installed here in a minimal form)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from .headroom_proc import Headroom
from .test_scheduling import node_of, pod_body, wait_bound, wait_unschedulable

pytestmark = pytest.mark.e2e

NODECLAIM_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "nodeclaims.karpenter.sh"},
    "spec": {
        "group": "karpenter.sh",
        "names": {
            "kind": "NodeClaim",
            "listKind": "NodeClaimList",
            "plural": "nodeclaims",
            "singular": "nodeclaim",
        },
        "scope": "Cluster",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def ensure_crd(api: k8s.ApiClient) -> None:
    ext: Any = k8s.ApiextensionsV1Api(api)
    try:
        ext.create_custom_resource_definition(NODECLAIM_CRD)
    except ApiException as e:
        if e.status != 409:
            raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        crd = ext.read_custom_resource_definition("nodeclaims.karpenter.sh")
        if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or []):
            return
        time.sleep(0.2)
    raise AssertionError("NodeClaim CRD not established")


def wait_refused(headroom: Headroom, node: str) -> None:
    probe = {
        "Pod": {
            "metadata": {"name": "probe", "namespace": "x", "uid": "probe"},
            "spec": {
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
            },
        },
        "NodeNames": [node],
    }
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        body = httpx.post(headroom.url + "/filter", json=probe).json()
        if "NodeClaim" in body["FailedAndUnresolvableNodes"].get(node, ""):
            return
        time.sleep(0.1)
    raise AssertionError("the extender never saw the NodeClaim deletion")


def test_deleting_nodeclaim_stops_new_gpu_pods(
    k8s_client: k8s.ApiClient,
    e2e_cluster: Any,
    kube_scheduler: Any,
    make_node: Any,
    namespace: str,
    tmp_path: Path,
) -> None:
    ensure_crd(k8s_client)
    custom: Any = k8s.CustomObjectsApi(k8s_client)
    core: Any = k8s.CoreV1Api(k8s_client)
    node = make_node("karp-od", gpus=8, capacity_type="on-demand", instance_type="g5.12xlarge")
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "gpu-x7k2p", "finalizers": ["karpenter.sh/termination"]},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"}
        },
    }
    custom.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim)
    custom.patch_cluster_custom_object_status(
        "karpenter.sh", "v1", "nodeclaims", "gpu-x7k2p", {"status": {"nodeName": node}}
    )
    headroom = Headroom(tmp_path, e2e_cluster.kubeconfig)
    headroom.start()  # after the CRD exists: the extender watches NodeClaims when served
    try:
        headroom.agent(node, "4xA10G:24Gi")
        kube_scheduler(headroom.url)
        core.create_namespaced_pod(namespace, pod_body("before", "8Gi"))
        assert node_of(wait_bound(core, namespace, "before")) == node
        custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "gpu-x7k2p")
        wait_refused(headroom, node)  # the watch event has reached the extender
        core.create_namespaced_pod(namespace, pod_body("after", "8Gi"))
        message = wait_unschedulable(core, namespace, "after")
        assert "NodeClaim" in message, message
    finally:
        headroom.stop()
        custom.patch_cluster_custom_object(
            "karpenter.sh", "v1", "nodeclaims", "gpu-x7k2p", {"metadata": {"finalizers": None}}
        )
