"""What a pod asks of GPUs, read from its spec and annotations (README "How a pod asks").

- Classic: ``nvidia.com/gpu: N`` plus ``headroom.dev/gpu-memory: 20Gi`` per GPU; without the
  annotation each GPU is wanted whole.
- MIG: ``nvidia.com/mig-<profile>: N``.
- DRA: ``spec.resourceClaims`` (scored by the extender, allocated by kube-scheduler's DRA plugin).
- Capacity: ``headroom.dev/capacity-type: spot|on-demand|any``; ``karpenter.sh/do-not-disrupt``
  implies on-demand.
- The whole node: the pod's CPU and memory requests as kube-scheduler counts them
  (``state.host.pod_requests``), and the GPU models its ``nodeSelector`` or required node
  affinity on ``nvidia.com/gpu.product`` allows (the workload mix records both).
"""

from __future__ import annotations

from extender.core.quantity import quantity_to_int, quantity_to_mib, shown

# the demand types are scoring's plain data; importers may take them from here too
from extender.scoring.model import CapacityPref, GpuDemand, canonical_model
from extender.state.host import pod_requests
from extender.state.nodefacts import GPU_RESOURCE
from extender.wire.annotations import ANN_CAPACITY, ANN_MEMORY
from extender.wire.protocol import Container, Pod

GPU_PRODUCT = "nvidia.com/gpu.product"  # GPU feature discovery's model label

MIG_PREFIX = "nvidia.com/mig-"
ANN_DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
MAX_GPUS_PER_POD = 64

NO_GPU = GpuDemand(count=0)


class DemandError(ValueError):
    """The pod's GPU request cannot be understood; the message says how to fix it."""


def demand_of(pod: Pod) -> GpuDemand:
    """Read a pod's GPU demand. Raises DemandError on a malformed request."""
    gpus, mig = _container_counts(pod.spec.containers)
    init_gpus, init_mig = _container_counts(pod.spec.initContainers or [])
    # init containers run one at a time before the app containers: the pod needs the max
    gpus = max(gpus, init_gpus)
    for profile, n in init_mig.items():
        mig[profile] = max(mig.get(profile, 0), n)
    claims = tuple(c.name for c in pod.spec.resourceClaims or [])
    annotations = pod.metadata.annotations or {}
    capacity = _capacity(annotations)
    if len(mig) > 1 or (mig and gpus):
        raise DemandError("a pod may ask for one kind of GPU: nvidia.com/gpu or one MIG profile")
    cpu, host_mib = pod_requests(pod)
    models = allowed_models(pod)
    profile, n = next(iter(mig.items())) if mig else ("", gpus)
    return GpuDemand(
        count=n,
        memory_mib=_memory(annotations) if gpus else None,
        mig_profile=profile,
        capacity=capacity,
        dra_claims=claims,
        cpu_milli=cpu,
        host_memory_mib=host_mib,
        models=models,
    )


def allowed_models(pod: Pod) -> frozenset[str]:
    """GPU models (canonical) the pod's node selector and required node affinity allow on
    ``nvidia.com/gpu.product``; empty: any. Affinity terms are alternatives, so one term
    that leaves the model open leaves it open."""
    chosen = (pod.spec.nodeSelector or {}).get(GPU_PRODUCT)
    allowed = frozenset({canonical_model(chosen)}) if chosen else frozenset()
    aff = pod.spec.affinity
    node_aff = aff.nodeAffinity if aff else None
    required = node_aff.requiredDuringSchedulingIgnoredDuringExecution if node_aff else None
    terms = (required.nodeSelectorTerms or []) if required else []
    union: set[str] = set()
    for term in terms:
        values = [
            canonical_model(v)
            for e in term.matchExpressions or []
            if e.key == GPU_PRODUCT and e.operator == "In"
            for v in e.values or []
        ]
        if not values:
            return allowed
        union.update(values)
    if not union:
        return allowed
    return allowed & union if allowed else frozenset(union)


def states_preferences(pod: Pod) -> bool:
    """Whether the pod states a preference among the nodes that fit it: soft node
    affinity, soft pod (anti-)affinity, or spreading that may be broken
    (``ScheduleAnyway``). kube-scheduler's score plugins weigh those, so the filter
    must leave it a choice (``narrowing.passing`` decides only for pods without any)."""
    aff = pod.spec.affinity
    if aff is not None and any(
        part is not None and part.preferredDuringSchedulingIgnoredDuringExecution
        for part in (aff.nodeAffinity, aff.podAffinity, aff.podAntiAffinity)
    ):
        return True
    spread = pod.spec.topologySpreadConstraints or []
    return any(c.whenUnsatisfiable == "ScheduleAnyway" for c in spread)


def _container_counts(containers: list[Container]) -> tuple[int, dict[str, int]]:
    gpus = 0
    mig: dict[str, int] = {}
    for c in containers:
        res = c.resources
        if res is None:
            continue
        wanted = {
            **(res.requests or {}),
            **(res.limits or {}),
        }  # limits win, as for extended resources
        for name, value in wanted.items():
            if name == GPU_RESOURCE:
                gpus += _count(name, value)
            elif name.startswith(MIG_PREFIX):
                profile = name[len(MIG_PREFIX) :]
                mig[profile] = mig.get(profile, 0) + _count(name, value)
    return gpus, mig


def _count(name: str, value: str) -> int:
    try:
        n = quantity_to_int(value)
    except ValueError as e:
        raise DemandError(f"resource {name}: {e}") from None
    if n > MAX_GPUS_PER_POD:
        raise DemandError(f"resource {name}: {n} GPUs is more than any node has")
    return n


def _memory(annotations: dict[str, str]) -> int | None:
    text = annotations.get(ANN_MEMORY)
    if text is None:
        return None
    try:
        # ASCII whitespace trimmed as Kubernetes trims a quantity it decodes from JSON
        mib = quantity_to_mib(text.strip(" \t\n\r"))
    except ValueError as e:
        raise DemandError(f"annotation {ANN_MEMORY}: {e} (write e.g. '20Gi')") from None
    if mib <= 0:
        raise DemandError(f"annotation {ANN_MEMORY}: must be more than 0")
    return mib


def _capacity(annotations: dict[str, str]) -> CapacityPref:
    text = annotations.get(ANN_CAPACITY)
    if text is not None:
        try:
            return CapacityPref(text.strip().lower())
        except ValueError:
            raise DemandError(
                f"annotation {ANN_CAPACITY}: {shown(text)} is not one of spot, on-demand, any"
            ) from None
    if annotations.get(ANN_DO_NOT_DISRUPT, "").lower() == "true":
        return CapacityPref.ON_DEMAND
    return CapacityPref.ANY
