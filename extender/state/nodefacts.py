"""Node facts from Kubernetes/Karpenter labels and taints (docs/protocol.md §3)."""

from __future__ import annotations

import msgspec

from extender.wire.protocol import Node

CAPACITY_TYPE = "karpenter.sh/capacity-type"
NODEPOOL = "karpenter.sh/nodepool"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"  # MiB per GPU
GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
DISRUPTED_TAINT = "karpenter.sh/disrupted"


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


def facts_from_labels(
    name: str, labels: dict[str, str], taint_keys: tuple[str, ...] = (), deleting: bool = False
) -> NodeFacts:
    return NodeFacts(
        name=name,
        capacity_type=labels.get(CAPACITY_TYPE, ""),
        instance_type=labels.get(INSTANCE_TYPE, ""),
        nodepool=labels.get(NODEPOOL, ""),
        zone=labels.get(ZONE, ""),
        gpu_count_hint=_int(labels.get(GPU_COUNT)),
        gpu_memory_mib_hint=_int(labels.get(GPU_MEMORY)),
        gpu_model_hint=labels.get(GPU_NAME, ""),
        disrupted=deleting or DISRUPTED_TAINT in taint_keys,
    )


def facts_from_node(node: Node) -> NodeFacts:
    taints = tuple(t.key for t in node.spec.taints or [])
    facts = facts_from_labels(
        node.metadata.name,
        node.metadata.labels or {},
        taints,
        deleting=node.metadata.deletionTimestamp is not None,
    )
    return msgspec.structs.replace(facts, unschedulable=True) if node.spec.unschedulable else facts


def _int(text: str | None) -> int:
    if not text:
        return 0
    try:
        return max(0, int(text))
    except ValueError:
        return 0
