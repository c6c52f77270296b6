"""Real-shaped objects of the NVIDIA DRA driver (gpu.nvidia.com) for the DRA tests.

Shapes follow docs/protocol.md §2.5 (cmd/gpu-kubelet-plugin/deviceinfo.go, mig.go): full GPUs
named ``gpu-<minor>`` with type/uuid/productName/brand/architecture strings,
cudaComputeCapability/driverVersion/cudaDriverVersion versions, the standard PCI
attributes and a ``memory`` capacity; MIG devices named
``gpu-<parent>-mig-<profile without dots>-<giProfileId>-<placement>`` with
profile/parentUUID, engine capacities, ``memory`` and ``memorySlice<i>``. The pool is
named after the node (the driver's default). ``test_shapes`` validates every object
here against the resource.k8s.io/v1 schema, so they cannot drift from the API.
"""

from __future__ import annotations

import copy
from typing import Any

DRIVER = "gpu.nvidia.com"
H100_NODE = "ip-10-0-1-17.ec2.internal"
A100_NODE = "ip-10-0-2-33.ec2.internal"
H100_UUIDS = [
    "GPU-4b0c3b1f-7e2a-5d1e-9c3f-1a2b3c4d5e6f",
    "GPU-9f8e7d6c-5b4a-3c2d-1e0f-a1b2c3d4e5f6",
]
A100_UUID = "GPU-1d2c3b4a-0f9e-8d7c-6b5a-493827160fed"
MIG_1G_UUID = "MIG-5c1a9e7e-2f43-5a5c-9b1e-0d6f1c2e3a4b"
MIG_3G_UUID = "MIG-7e2b8f6d-3a54-5b6d-8c2f-1e7a2d3f4b5c"


def _s(value: str) -> dict[str, str]:
    return {"string": value}


def _v(value: str) -> dict[str, str]:
    return {"version": value}


def h100_device(minor: int, uuid: str) -> dict[str, Any]:
    return {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": _s("gpu"),
            "uuid": _s(uuid),
            "productName": _s("NVIDIA H100 80GB HBM3"),
            "brand": _s("Nvidia"),
            "architecture": _s("Hopper"),
            "cudaComputeCapability": _v("9.0.0"),
            "driverVersion": _v("550.90.7"),
            "cudaDriverVersion": _v("12.4.0"),
            "resource.kubernetes.io/pciBusID": _s(f"0000:{0x18 + minor * 0x10:02x}:00.0"),
            "resource.kubernetes.io/pcieRoot": _s(f"pci0000:{0x10 + minor * 0x10:02x}"),
        },
        "capacity": {"memory": {"value": "81559Mi"}},
    }


def slice_for(
    node: str,
    devices: list[dict[str, Any]],
    generation: int = 1,
    name_suffix: str = "gpu.nvidia.com-x7kq2",
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{name_suffix}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def h100_slice(generation: int = 1) -> dict[str, Any]:
    """A p5-style node, two H100 80GB GPUs shown (enough for the allocation cases)."""
    return slice_for(H100_NODE, [h100_device(i, u) for i, u in enumerate(H100_UUIDS)], generation)


def _mig(
    name: str, uuid: str, profile: str, memory: str, sms: str, slices: range
) -> dict[str, Any]:
    capacity: dict[str, Any] = {
        "multiprocessors": {"value": sms},
        "copyEngines": {"value": "1" if len(slices) == 1 else "3"},
        "decoders": {"value": "0" if len(slices) == 1 else "2"},
        "encoders": {"value": "0"},
        "jpegEngines": {"value": "0" if len(slices) == 1 else "1"},
        "ofaEngines": {"value": "0"},
        "memory": {"value": memory},
    }
    for i in slices:
        capacity[f"memorySlice{i}"] = {"value": "1"}
    return {
        "name": name,
        "attributes": {
            "type": _s("mig"),
            "uuid": _s(uuid),
            "parentUUID": _s(A100_UUID),
            "profile": _s(profile),
            "productName": _s("NVIDIA A100-SXM4-80GB"),
            "brand": _s("Nvidia"),
            "architecture": _s("Ampere"),
            "cudaComputeCapability": _v("8.0.0"),
            "driverVersion": _v("550.90.7"),
            "cudaDriverVersion": _v("12.4.0"),
            "resource.kubernetes.io/pciBusID": _s("0000:07:00.0"),
        },
        "capacity": capacity,
    }


def mig_1g() -> dict[str, Any]:
    return _mig("gpu-0-mig-1g10gb-19-6", MIG_1G_UUID, "1g.10gb", "9728Mi", "14", range(6, 7))


def mig_3g() -> dict[str, Any]:
    return _mig("gpu-0-mig-3g40gb-9-0", MIG_3G_UUID, "3g.40gb", "40192Mi", "42", range(0, 4))


def a100_mig_slice(with_parent: bool = False) -> dict[str, Any]:
    """Static MIG: only MIG devices are published (``with_parent`` adds the full GPU)."""
    devices = [mig_3g(), mig_1g()]
    if with_parent:
        parent = h100_device(0, A100_UUID)
        parent["name"] = "gpu-0"
        parent["attributes"]["productName"] = _s("NVIDIA A100-SXM4-80GB")
        parent["capacity"] = {"memory": {"value": "81920Mi"}}
        devices.insert(0, parent)
    return slice_for(A100_NODE, devices)


def device_class(device_type: str = "gpu", name: str = "gpu.nvidia.com") -> dict[str, Any]:
    """As the chart's deviceclass-*.yaml installs it."""
    expr = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{device_type}'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expr}}]},
    }


CLASSES = {
    "gpu.nvidia.com": device_class("gpu"),
    "mig.nvidia.com": device_class("mig", "mig.nvidia.com"),
}


def allocated_claim(reserved_pods: list[tuple[str, str]]) -> dict[str, Any]:
    """A claim as kube-scheduler's DRA plugin leaves it: allocated, shared by two pods.

    The result carries shareID and consumedCapacity (a DRAConsumableCapacity grant of
    20Gi on gpu-1), and the nodeSelector the allocator writes for a node-local pool.
    """
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "trainer-0-gpu-8kq2p",
            "namespace": "ml",
            "uid": "2f1c6c1e-8a7b-4b63-9d0e-5f1e2d3c4b5a",
            "annotations": {
                "resource.kubernetes.io/pod-claim-name": "gpu",
                "headroom.dev/gpu-memory": "20Gi",
            },
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "allocationMode": "ExactCount",
                            "count": 1,
                            "selectors": [
                                {
                                    "cel": {
                                        "expression": "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('20Gi')) >= 0"  # noqa: E501 - a CEL expression kept whole
                                    }
                                }
                            ],
                        },
                    }
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": DRIVER,
                            "pool": H100_NODE,
                            "device": "gpu-1",
                            "shareID": "7d3e1f0a-4c5b-4e6f-8a9b-0c1d2e3f4a5b",
                            "consumedCapacity": {"memory": "20Gi"},
                        }
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [H100_NODE]}
                            ]
                        }
                    ]
                },
                "allocationTimestamp": "2026-08-21T10:15:02Z",
            },
            "reservedFor": [
                {"resource": "pods", "name": name, "uid": uid} for name, uid in reserved_pods
            ],
        },
    }


def copy_of(obj: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(obj)


def shareable_slice(memory: str = "24Gi", policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The H100 node's GPUs as the driver publishes them with ``--consumable-shares=memory``:
    ``allowMultipleAllocations`` and a ``memory`` capacity with a 1Mi step."""
    rule = policy or {"default": "1Mi", "validRange": {"min": "1Mi", "step": "1Mi"}}
    devices = []
    for i, uuid in enumerate(H100_UUIDS):
        device = h100_device(i, uuid)
        device["allowMultipleAllocations"] = True
        device["capacity"] = {"memory": {"value": memory, "requestPolicy": rule}}
        devices.append(device)
    return slice_for(H100_NODE, devices)
