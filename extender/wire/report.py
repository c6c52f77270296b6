"""Agent report wire schema, version 1 (``POST /v1/reports``).

The node agent (``headroom agent``) samples NVML and sends one ``NodeReport`` per
interval; the extender answers with a ``ReportResponse`` carrying the node's current
grants so the agent can flag processes on GPUs their pod was not given.

Units are MiB (integers) for memory and percent (0..100) for utilisation. Times are
Unix seconds from the *agent's* clock; the extender never trusts them for staleness
(it stamps its own receive time), so clock skew cannot make a dead node look fresh.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

SCHEMA_V1 = "headroom.dev/report/v1"

# Bounds that keep one report from exhausting the extender (validated on receipt).
MAX_GPUS = 64
MAX_PROCESSES_PER_GPU = 4096
MAX_MIG_PER_GPU = 16
MAX_STRING = 256
MAX_REPORT_BYTES = 4 * 1024 * 1024
MAX_LABELS = 512  # a node carries tens of labels; Node Feature Discovery adds hundreds
MAX_PODS = 1024  # pods kubelet's pod-resources lists (kubelet's default max is 110)
MAX_CONTAINERS = 64  # per pod, init containers included
MAX_DEVICE_IDS = 256  # per container and resource (a 16-GPU node x 16 replicas)

# Every string an agent sends is bounded at decode time (a 3 MB label once grew the
# ledger by 4 MB a report): msgspec refuses a longer one, naming its path.
Text = Annotated[str, msgspec.Meta(max_length=MAX_STRING)]
Labels = Annotated[dict[Text, Text], msgspec.Meta(max_length=MAX_LABELS)]


class ProcessReport(msgspec.Struct, omit_defaults=True):
    """One compute process on a GPU (or MIG instance), as NVML sees it (host PID)."""

    pid: int
    used_mib: int | None = None  # NVML usedGpuMemory may be unavailable
    pod_uid: Text | None = None  # None: the PID could not be mapped to a pod
    container_id: Text | None = None
    sm_util: float | None = None  # per-process SM utilisation, when NVML has samples
    unmapped_reason: Text | None = None  # why pod_uid is None (e.g. "not a kubepods cgroup")


class MigReport(msgspec.Struct, omit_defaults=True):
    """One MIG instance on a MIG-enabled GPU."""

    uuid: Text
    profile: Text  # e.g. "1g.10gb"
    memory_total_mib: int
    memory_used_mib: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    processes: list[ProcessReport] = msgspec.field(default_factory=list)


class GpuReport(msgspec.Struct, omit_defaults=True):
    """One physical GPU."""

    uuid: Text
    index: int
    model: Text
    memory_total_mib: int
    memory_used_mib: int
    memory_reserved_mib: int | None = None  # NVML v2 memory info: driver/firmware reserve
    utilization_gpu: float | None = None  # device utilisation %, absent on MIG
    healthy: bool = True
    health_reason: Text | None = None
    mig_enabled: bool = False
    mig: list[MigReport] = msgspec.field(default_factory=list)
    processes: list[ProcessReport] = msgspec.field(default_factory=list)


class DeviceIds(msgspec.Struct, omit_defaults=True):
    """One device plugin resource a container holds: kubelet's ``ContainerDevices``."""

    resource_name: Text
    device_ids: Annotated[list[Text], msgspec.Meta(max_length=MAX_DEVICE_IDS)]


class ClaimDevice(msgspec.Struct, omit_defaults=True):
    """One DRA device a container holds through a claim: kubelet's ``ClaimResource``."""

    claim_namespace: Text
    claim_name: Text
    driver: Text
    pool: Text
    device: Text
    share_id: Text | None = None  # consumable capacity: which share of the device


class ContainerReceived(msgspec.Struct, omit_defaults=True):
    """What kubelet's pod-resources API says one container holds."""

    name: Text
    devices: Annotated[list[DeviceIds], msgspec.Meta(max_length=MAX_DEVICE_IDS)] = msgspec.field(
        default_factory=list
    )
    claims: Annotated[list[ClaimDevice], msgspec.Meta(max_length=MAX_DEVICE_IDS)] = msgspec.field(
        default_factory=list
    )


class PodReceived(msgspec.Struct, omit_defaults=True):
    """One pod as kubelet's pod-resources lists it: by name (the API carries no UID)."""

    namespace: Text
    name: Text
    containers: Annotated[list[ContainerReceived], msgspec.Meta(max_length=MAX_CONTAINERS)]


class NodeReport(msgspec.Struct, omit_defaults=True):
    """What one node's agent measured at ``sampled_at``."""

    node: Text
    sampled_at: float
    gpus: list[GpuReport]
    schema: Text = SCHEMA_V1
    agent_version: Text = ""
    driver: Text = ""  # "nvml" | "simulated"
    driver_version: Text | None = None
    # Node labels as the agent sees them; used only in standalone mode (no cluster)
    # when the scheduler sends node names and no Node object was ever seen.
    labels: Labels = msgspec.field(default_factory=dict)
    # The node's allocatable as Kubernetes quantities ({"cpu": "64", "memory": "256Gi"}),
    # used, like labels, only while no Node object is known (standalone mode)
    allocatable: Labels = msgspec.field(default_factory=dict)
    # What kubelet's pod-resources API says each pod holds (the truth loop,
    # docs/device-plugin.md). None: not read (an older agent, or no socket on this node),
    # so nothing is judged; [] : read, and no pod holds a device.
    received: Annotated[list[PodReceived], msgspec.Meta(max_length=MAX_PODS)] | None = None


class PodGrant(msgspec.Struct, omit_defaults=True):
    """What the ledger says one pod on this node was given."""

    pod_uid: str
    namespace: str
    name: str
    gpu_uuids: list[str]
    memory_mib: int  # per GPU


class ReportResponse(msgspec.Struct, omit_defaults=True):
    accepted: bool
    node: str
    received_at: float
    grants: list[PodGrant] = msgspec.field(default_factory=list)
    stale_after_s: float | None = None


report_decoder = msgspec.json.Decoder(NodeReport)


def validate_report(report: NodeReport) -> str:
    """The first thing wrong with a decoded report (naming the field), or "" if sane."""
    if report.schema != SCHEMA_V1:
        return f"schema: unsupported {report.schema!r}, this extender speaks {SCHEMA_V1!r}"
    if not report.node or len(report.node) > MAX_STRING:
        return "node: must be a node name of 1..256 characters"
    if len(report.gpus) > MAX_GPUS:
        return f"gpus: {len(report.gpus)} GPUs is more than {MAX_GPUS}"
    seen: set[str] = set()
    for i, g in enumerate(report.gpus):
        problem = _gpu_problem(g, seen)
        if problem:
            return f"gpus[{i}].{problem}"
    return ""


def _gpu_problem(g: GpuReport, seen: set[str]) -> str:
    if not g.uuid or len(g.uuid) > MAX_STRING or len(g.model) > MAX_STRING:
        return "uuid: must be 1..256 characters (model too)"
    if g.uuid in seen:
        return f"uuid: duplicate {g.uuid!r}"
    seen.add(g.uuid)
    if g.memory_total_mib <= 0 or g.memory_total_mib > 16 * 1024 * 1024:
        return f"memory_total_mib: {g.memory_total_mib} is not a plausible GPU size"
    if not 0 <= g.memory_used_mib <= g.memory_total_mib:
        return f"memory_used_mib: {g.memory_used_mib} not within 0..memory_total_mib"
    if g.index < 0:
        return "index: must be >= 0"
    if len(g.processes) > MAX_PROCESSES_PER_GPU or len(g.mig) > MAX_MIG_PER_GPU:
        return "processes: too many processes or MIG instances"
    for j, m in enumerate(g.mig):
        if m.uuid in seen:
            return f"mig[{j}].uuid: duplicate {m.uuid!r}"
        seen.add(m.uuid)
        if not 0 <= m.memory_used_mib <= m.memory_total_mib <= g.memory_total_mib:
            return f"mig[{j}].memory_used_mib: not within 0..memory_total_mib <= GPU total"
        if len(m.processes) > MAX_PROCESSES_PER_GPU:
            return f"mig[{j}].processes: too many"
    for j, p in enumerate(g.processes):
        if p.used_mib is not None and not 0 <= p.used_mib <= g.memory_total_mib:
            return f"processes[{j}].used_mib: {p.used_mib} not within 0..memory_total_mib"
    return ""
