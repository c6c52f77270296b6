"""kube-scheduler HTTP extender wire types (``k8s.io/kube-scheduler/extender/v1``).

The Go structs have no json tags, so the keys are the Go field names exactly
(``Pod``, ``NodeNames``, ``FailedNodes`` ...). Pods and Nodes are decoded only as deep
as scheduling needs; unknown fields are ignored, so newer schedulers stay compatible.
In Nodes mode (``nodeCacheCapable: false``) each node is kept as raw JSON so the
passing set can be echoed back without re-encoding multi-megabyte Node objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import msgspec

# --- partial core/v1 objects -------------------------------------------------------


class OwnerReference(msgspec.Struct):
    kind: str = ""
    name: str = ""
    controller: bool | None = None


class ObjectMeta(msgspec.Struct):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    ownerReferences: list[OwnerReference] | None = None
    deletionTimestamp: str | None = None


class ResourceRequirements(msgspec.Struct):
    limits: dict[str, str] | None = None
    requests: dict[str, str] | None = None


class EnvVar(msgspec.Struct):
    name: str = ""
    value: str | None = None


class Container(msgspec.Struct):
    name: str = ""
    resources: ResourceRequirements | None = None
    env: list[EnvVar] | None = None
    restartPolicy: str | None = None  # "Always" on an init container: a sidecar


class NodeSelectorRequirement(msgspec.Struct):
    key: str = ""
    operator: str = ""
    values: list[str] | None = None


class NodeSelectorTerm(msgspec.Struct):
    matchExpressions: list[NodeSelectorRequirement] | None = None


class NodeSelector(msgspec.Struct):
    nodeSelectorTerms: list[NodeSelectorTerm] | None = None


class PreferredTerm(msgspec.Struct):
    """A soft affinity term: only that it exists is read, its fields are skipped."""


class NodeAffinity(msgspec.Struct):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None = None
    preferredDuringSchedulingIgnoredDuringExecution: list[PreferredTerm] | None = None


class PodAffinity(msgspec.Struct):
    """podAffinity or podAntiAffinity; the required terms are the in-tree filter's."""

    preferredDuringSchedulingIgnoredDuringExecution: list[PreferredTerm] | None = None


class Affinity(msgspec.Struct):
    nodeAffinity: NodeAffinity | None = None
    podAffinity: PodAffinity | None = None
    podAntiAffinity: PodAffinity | None = None


class TopologySpreadConstraint(msgspec.Struct):
    whenUnsatisfiable: str = ""  # "ScheduleAnyway": a preference, scored in-tree


class PodResourceClaim(msgspec.Struct):
    name: str = ""
    resourceClaimName: str | None = None
    resourceClaimTemplateName: str | None = None


class PodSpec(msgspec.Struct):
    containers: list[Container] = msgspec.field(default_factory=list)
    initContainers: list[Container] | None = None
    resourceClaims: list[PodResourceClaim] | None = None
    nodeName: str | None = None
    overhead: dict[str, str] | None = None
    nodeSelector: dict[str, str] | None = None
    affinity: Affinity | None = None
    topologySpreadConstraints: list[TopologySpreadConstraint] | None = None
    schedulerName: str | None = None  # None: the default profile ("default-scheduler")


class PodResourceClaimStatus(msgspec.Struct):
    name: str = ""
    resourceClaimName: str | None = None


class PodStatus(msgspec.Struct):
    phase: str | None = None
    resourceClaimStatuses: list[PodResourceClaimStatus] | None = None


class Pod(msgspec.Struct):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class Taint(msgspec.Struct):
    key: str = ""
    value: str | None = None
    effect: str = ""


class NodeSpec(msgspec.Struct):
    taints: list[Taint] | None = None
    unschedulable: bool | None = None


class NodeStatus(msgspec.Struct):
    allocatable: dict[str, str] | None = None


class Node(msgspec.Struct):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


# --- extender messages --------------------------------------------------------------


class RawNodeList(msgspec.Struct):
    items: list[msgspec.Raw] = msgspec.field(default_factory=list)


# a Kubernetes object name (DNS subdomain) is 1..253 characters; checked while decoding,
# because a Python loop over 5,000 names costs more than the rest of a cached filter
NodeName = Annotated[str, msgspec.Meta(min_length=1, max_length=253)]


class ExtenderArgs(msgspec.Struct):
    """Request body of filter and prioritize."""

    Pod: Pod | None = None
    Nodes: RawNodeList | None = None
    NodeNames: Sequence[NodeName] | None = None  # decoded: a list (or a ``NameList``)


class ExtenderFilterResult(msgspec.Struct):
    """Filter reply. ``Nodes`` is written by hand (raw echo) in Nodes mode."""

    NodeNames: Sequence[str] | None = None  # decoded: a list; made: a list or ``NameList``
    FailedNodes: dict[str, str] = msgspec.field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = msgspec.field(default_factory=dict)
    Error: str = ""


class HostPriority(msgspec.Struct):
    Host: str
    Score: int


class ExtenderBindingArgs(msgspec.Struct):
    PodName: str = ""
    PodNamespace: str = ""
    PodUID: str = ""
    Node: str = ""


class ExtenderBindingResult(msgspec.Struct):
    Error: str = ""


class MetaPod(msgspec.Struct):
    UID: str


class MetaVictims(msgspec.Struct):
    Pods: list[MetaPod] = msgspec.field(default_factory=list)
    NumPDBViolations: int = 0


class Victims(msgspec.Struct):
    Pods: list[Pod] = msgspec.field(default_factory=list)
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(msgspec.Struct):
    Pod: Pod | None = None
    NodeNameToVictims: dict[str, Victims] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


class ExtenderPreemptionResult(msgspec.Struct):
    NodeNameToMetaVictims: dict[str, MetaVictims] = msgspec.field(default_factory=dict)


MIN_PRIORITY = 0
MAX_PRIORITY = 10

args_decoder = msgspec.json.Decoder(ExtenderArgs)
binding_decoder = msgspec.json.Decoder(ExtenderBindingArgs)
preemption_decoder = msgspec.json.Decoder(ExtenderPreemptionArgs)
node_decoder = msgspec.json.Decoder(Node)


def _as_list(obj: object) -> object:
    """Sequences msgspec does not know (``namelists.NameList``) are written as lists."""
    if isinstance(obj, Sequence) and not isinstance(obj, str | bytes):
        return list(obj)
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


encoder = msgspec.json.Encoder(enc_hook=_as_list)


def encode_filter_result(
    result: ExtenderFilterResult,
    passing_raw: list[msgspec.Raw] | None,
    names_json: bytes | None = None,
) -> bytes:
    """Encode a filter reply; in Nodes mode splice the passing nodes' raw JSON back in,
    and a NodeNames list already written as JSON (``names_json``) in its place."""
    if names_json is not None:
        body = encoder.encode(msgspec.structs.replace(result, NodeNames=None))
        return b"".join((_NAMES_KEY, names_json, memoryview(body)[len(_NULL_NAMES) :]))
    body = encoder.encode(result)
    if passing_raw is None:
        return body
    # one join, one copy: tens of MB of Node JSON must not be copied twice
    parts: list[bytes | msgspec.Raw | memoryview] = [b'{"Nodes":{"metadata":{},"items":[']
    for i, raw in enumerate(passing_raw):
        if i:
            parts.append(b",")
        parts.append(raw)
    parts.append(b"]},")
    parts.append(memoryview(body)[1:])
    return b"".join(parts)


_NAMES_KEY = b'{"NodeNames":'  # ExtenderFilterResult's first field, as encoded
_NULL_NAMES = _NAMES_KEY + b"null"
