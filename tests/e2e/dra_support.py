"""What the DRA e2e tests share: NVIDIA-shaped ResourceSlices, ``headroom claim`` run as a
process, objects read raw (the Python client's models may lag the v1.37 fields:
``consumedCapacity``, ``shareID``, ``extendedResourceClaimStatus``), and waits."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import yaml

DRIVER = "gpu.nvidia.com"
# as the driver publishes with --consumable-shares=memory: shares of 1Mi steps
MEMORY_POLICY = {"default": "1Mi", "validRange": {"min": "1Mi", "step": "1Mi"}}


def nvidia_slice(
    node: str, uuids: list[str], memory: str = "24Gi", shareable: bool = False
) -> dict[str, Any]:
    """A ResourceSlice shaped like NVIDIA's kubelet plugin publishes (docs/protocol.md §2.5);
    ``shareable``: with ``allowMultipleAllocations`` and a memory ``requestPolicy``."""
    devices = []
    for i, uuid in enumerate(uuids):
        device: dict[str, Any] = {
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
        if shareable:
            device["allowMultipleAllocations"] = True
            device["capacity"]["memory"]["requestPolicy"] = MEMORY_POLICY
        devices.append(device)
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
    """``headroom claim ARGS``' YAML documents, as a user would pipe them to kubectl."""
    out = subprocess.run(
        [sys.executable, "-m", "extender.cli", "claim", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def claim_from(template: dict[str, Any], name: str) -> dict[str, Any]:
    """The claim the resourceclaim controller would stamp from the template (no
    kube-controller-manager runs here)."""
    return {
        "metadata": {"name": name, **template["spec"].get("metadata", {})},
        "spec": template["spec"]["spec"],
    }


def raw(read: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """The object as the apiserver sent it (every field, known to the client or not)."""
    out: dict[str, Any] = json.loads(read(*args, _preload_content=False).data)
    return out


def claim_pod(name: str, claim: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {"team": "e2e"}},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60) -> Any:
    """``probe()`` once it is truthy; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")
