"""DRA end to end: ``headroom claim`` objects accepted by the real apiserver, the real
scheduler allocates, and the ledger records exactly what ``status.allocation`` says."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from .headroom_proc import Headroom

pytestmark = pytest.mark.e2e
DRIVER = "gpu.nvidia.com"


@pytest.fixture
def headroom(e2e_cluster: Any, tmp_path: Path) -> Iterator[Headroom]:
    h = Headroom(tmp_path, e2e_cluster.kubeconfig)
    h.start()
    yield h
    h.stop()


def nvidia_slice(node: str, uuids: list[str], memory: str = "24Gi") -> dict[str, Any]:
    """A ResourceSlice shaped like NVIDIA's kubelet plugin publishes (docs/protocol.md §2.5)."""
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": uuid},
                "productName": {"string": "NVIDIA A10G"},
                "brand": {"string": "Nvidia"},
                "architecture": {"string": "Ampere"},
                "cudaComputeCapability": {"version": "8.6.0"},
                "driverVersion": {"version": "580.65.6"},
                "resource.kubernetes.io/pciBusID": {"string": f"0000:{i:02x}:1e.0"},
            },
            "capacity": {"memory": {"value": memory}},
        }
        for i, uuid in enumerate(uuids)
    ]
    return {
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "devices": devices,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        },
    }


def headroom_claim(*args: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-m", "extender.cli", "claim", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_dra_allocation_is_recorded_as_status_allocation_says(
    k8s_client: k8s.ApiClient,
    kube_scheduler: Any,
    headroom: Headroom,
    make_node: Any,
    namespace: str,
) -> None:
    core: Any = k8s.CoreV1Api(k8s_client)
    res: Any = k8s.ResourceV1Api(k8s_client)
    nodes = [
        make_node(f"dra-{s}", gpus=0, capacity_type=s, instance_type="g5.12xlarge")
        for s in ("spot", "on-demand")
    ]
    for node in nodes:
        driver = headroom.agent(node, "4xA10G:24Gi")
        res.create_resource_slice(nvidia_slice(node, driver.gpu_uuids))
    template, device_class = headroom_claim("--memory", "20Gi", "--device-class")
    res.create_device_class(device_class)
    # the template is accepted by the real apiserver as headroom claim wrote it
    res.create_namespaced_resource_claim_template(namespace, template)
    # no kube-controller-manager here to stamp claims from templates: make the claim
    # from the template's own spec, as the controller would
    claim = {
        "metadata": {"name": "train-gpu", **template["spec"].get("metadata", {})},
        "spec": template["spec"]["spec"],
    }
    res.create_namespaced_resource_claim(namespace, claim)
    kube_scheduler(headroom.url)
    try:
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": "dra-train", "labels": {"team": "research"}},
                "spec": {
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "train-gpu"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"claims": [{"name": "gpu"}]},
                        }
                    ],
                },
            },
        )
        deadline = time.monotonic() + 60
        rows: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not rows:
            pod = core.read_namespaced_pod("dra-train", namespace)
            if pod.spec.node_name:
                rows = headroom.allocations(pod=pod.metadata.uid)
            time.sleep(0.3)
        assert rows, f"no ledger row for the DRA pod; pod node={pod.spec.node_name}"
        allocated = res.read_namespaced_resource_claim("train-gpu", namespace).status
        (result,) = allocated.allocation.devices.results
        (row,) = rows
        live = res.read_resource_slice(f"{result.pool}-{DRIVER}")
        device = next(d for d in live.spec.devices if d.name == result.device)
        assert row["node"] == pod.spec.node_name == result.pool
        assert row["dra_device"] == f"{result.driver}/{result.pool}/{result.device}"
        assert row["gpu_uuid"] == device.attributes["uuid"].string
        assert row["sharing"] == "dra" and row["claim"] == f"{namespace}/train-gpu"
        assert row["memory_mib"] == 24576  # a whole device: no consumedCapacity
        assert row["status"] == "bound" and row["labels"] == {"team": "research"}
    finally:
        core.delete_namespaced_pod("dra-train", namespace, grace_period_seconds=0)
        res.delete_namespaced_resource_claim("train-gpu", namespace)
        for node in nodes:
            res.delete_resource_slice(f"{node}-{DRIVER}")
        res.delete_device_class(DRIVER)
