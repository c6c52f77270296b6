"""Node facts from Kubernetes, Karpenter, EKS, GKE and AKS labels and taints.

Label keys and values, with their sources: docs/protocol.md §3."""

from __future__ import annotations

import msgspec

from extender.core.quantity import quantity_to_int
from extender.state.host import allocatable_of
from extender.wire.protocol import Node

CAPACITY_TYPE = "karpenter.sh/capacity-type"
NODEPOOL = "karpenter.sh/nodepool"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"  # MiB per GPU
GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
GPU_RESOURCE = "nvidia.com/gpu"  # the extended resource name (extender.state.demand reads it)
DISRUPTED_TAINT = "karpenter.sh/disrupted"
# Capacity type and GPU model off Karpenter (docs/protocol.md §3, "Other clouds' node labels")
EKS_CAPACITY_TYPE = "eks.amazonaws.com/capacityType"  # managed node groups
_EKS = {"SPOT": "spot", "ON_DEMAND": "on-demand", "CAPACITY_BLOCK": "reserved"}
GKE_SPOT = "cloud.google.com/gke-spot"  # "true" on Spot VM nodes
GKE_PREEMPTIBLE = "cloud.google.com/gke-preemptible"  # "true" on preemptible VM nodes
GKE_NODEPOOL = "cloud.google.com/gke-nodepool"
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"  # e.g. nvidia-l4, nvidia-tesla-t4
AKS_PRIORITY = "kubernetes.azure.com/scalesetpriority"  # "spot" on spot pools
# Set by the operator where headroom's device plugin runs (its DaemonSet's nodeSelector):
# the extender then waits for the plugin's acknowledgement of each grant on the node
# before it binds the next GPU pod there (scheduling/acks.py, docs/device-plugin.md)
DEVICE_PLUGIN = "headroom.dev/device-plugin"


class NodeFacts(msgspec.Struct, frozen=True, gc=False):  # one per node: see scoring.model
    name: str
    capacity_type: str = ""  # spot | on-demand | reserved | "" unknown
    instance_type: str = ""
    nodepool: str = ""
    zone: str = ""
    gpu_count_hint: int = 0  # from Karpenter's catalog labels, not measured
    gpu_memory_mib_hint: int = 0
    gpu_model_hint: str = ""
    disrupted: bool = False  # karpenter.sh/disrupted taint, or the Node is being deleted
    unschedulable: bool = False
    cpu_allocatable_milli: int = 0  # 0: not known (no Node object, no agent allocatable)
    memory_allocatable_mib: int = 0
    # nvidia.com/gpu in status.allocatable (a device plugin serves it); None: no Node object.
    # 0 where a DeviceClass has extendedResourceName nvidia.com/gpu: DRA serves (KEP-5004).
    gpu_allocatable: int | None = None
    device_plugin: bool = False  # headroom's device plugin serves the node's GPUs (DEVICE_PLUGIN)


def facts_from_labels(
    name: str, labels: dict[str, str], taint_keys: tuple[str, ...] = (), deleting: bool = False
) -> NodeFacts:
    return NodeFacts(
        name=name,
        capacity_type=capacity_type(labels),
        instance_type=labels.get(INSTANCE_TYPE, ""),
        nodepool=labels.get(NODEPOOL, ""),
        zone=labels.get(ZONE, ""),
        gpu_count_hint=_int(labels.get(GPU_COUNT)),
        gpu_memory_mib_hint=_int(labels.get(GPU_MEMORY)),
        gpu_model_hint=labels.get(GPU_NAME) or labels.get(GKE_ACCELERATOR, ""),
        disrupted=deleting or DISRUPTED_TAINT in taint_keys,
        device_plugin=labels.get(DEVICE_PLUGIN) == "true",
    )


def capacity_type(labels: dict[str, str]) -> str:
    """spot | on-demand | reserved from the first label that says: Karpenter's, then EKS
    managed node groups', GKE's Spot/preemptible flags, AKS's scale-set priority. A GKE
    node in a pool without the spot flags is on-demand; no label at all is "" (unknown)."""
    if karpenter := labels.get(CAPACITY_TYPE):
        return karpenter
    if eks := _EKS.get(labels.get(EKS_CAPACITY_TYPE, "").upper()):
        return eks
    if labels.get(GKE_SPOT) == "true" or labels.get(GKE_PREEMPTIBLE) == "true":
        return "spot"
    if GKE_NODEPOOL in labels:
        return "on-demand"
    aks = labels.get(AKS_PRIORITY, "").lower()
    if aks in ("spot", "regular"):
        return "spot" if aks == "spot" else "on-demand"
    return ""


def facts_from_node(node: Node) -> NodeFacts:
    taints = tuple(t.key for t in node.spec.taints or [])
    facts = facts_from_labels(
        node.metadata.name,
        node.metadata.labels or {},
        taints,
        deleting=node.metadata.deletionTimestamp is not None,
    )
    try:
        cpu, mem = allocatable_of(node.status.allocatable or {}, "status.allocatable")
    except ValueError:
        cpu, mem = 0, 0  # the API server validated it; an odd one is not known, not zero
    return msgspec.structs.replace(
        facts,
        unschedulable=bool(node.spec.unschedulable),
        cpu_allocatable_milli=cpu,
        memory_allocatable_mib=mem,
        gpu_allocatable=_count((node.status.allocatable or {}).get(GPU_RESOURCE)),
    )


def _count(text: str | None) -> int:
    """An extended resource's allocatable count; absent or unreadable is 0 (none served)."""
    try:
        return quantity_to_int(text) if text else 0
    except ValueError:
        return 0


def _int(text: str | None) -> int:
    if not text:
        return 0
    try:
        return max(0, int(text))
    except ValueError:
        return 0
