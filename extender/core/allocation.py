"""Plain data for allocation decisions, shared by placement, the binder and the ledger.

A ``Decision`` is what the extender chose for one pod at bind time (or what DRA
allocated, for claim pods): the node, and per GPU the memory slice and its price.
The ledger stores one allocation row per (pod, GPU) grant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum


class Sharing(StrEnum):
    EXCLUSIVE = "exclusive"  # the whole GPU, nobody else placed on it
    SHARED = "shared"  # a memory slice of a time-sliced / MPS GPU
    MIG = "mig"  # a MIG instance (profile in GpuGrant.mig_profile)
    DRA = "dra"  # a device allocated by DRA through a ResourceClaim


class Status(StrEnum):
    RESERVED = "reserved"  # decided, Binding not yet confirmed
    BOUND = "bound"  # Binding made
    RUNNING = "running"  # pod observed Running
    ENDED = "ended"  # released (pod finished, deleted, node gone)
    FAILED = "failed"  # bind failed; never charged


ACTIVE_STATUSES = (Status.RESERVED, Status.BOUND, Status.RUNNING)


class EventKind(StrEnum):
    DECISION = "decision"
    BIND_FAILED = "bind-failed"
    BOUND = "bound"
    STARTED = "started"
    RELEASED = "released"
    OVERRUN = "overrun"  # pod uses more memory than granted
    LEAK = "leak"  # process on a GPU its pod was not granted
    UNACCOUNTED = "unaccounted"  # GPU memory used by no known pod
    MISMATCH = "mismatch"  # the pod holds another GPU than it was granted (kubelet says)
    RECEIVED = "received"  # what a grant's pod holds per kubelet, and what it is billed
    NODE_PERIOD = "node-period"  # a node's price period opened (what its GPUs cost)
    NODE_PERIOD_CLOSED = "node-period-closed"  # ... and closed
    ACKNOWLEDGED = "acknowledged"  # the node's device plugin admitted the pod's grant
    UNACKNOWLEDGED = "unacknowledged"  # ... did not, within the extender's ack timeout


@dataclass(frozen=True)
class PodRef:
    uid: str
    namespace: str
    name: str
    owner_kind: str = ""
    owner_name: str = ""
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeRef:
    name: str
    instance_type: str = ""
    capacity_type: str = ""  # spot | on-demand | reserved | "" (unknown)
    zone: str = ""
    nodepool: str = ""


@dataclass(frozen=True)
class GpuGrant:
    """One GPU (or MIG instance) slice given to a pod."""

    gpu_uuid: str
    gpu_index: int
    model: str
    memory_mib: int  # granted; the billing anchor
    gpu_total_mib: int  # the device's total, for the share of its price
    sharing: Sharing
    price_per_hour: Decimal | None  # USD/h of this slice at decision time; None: unpriced
    mig_profile: str = ""
    claim: str = ""  # namespace/name of the ResourceClaim for DRA grants
    dra_device: str = ""  # driver/pool/device for DRA grants


@dataclass(frozen=True)
class Decision:
    pod: PodRef
    node: NodeRef
    grants: tuple[GpuGrant, ...]
    decided_at: float
    policy: str = ""


@dataclass(frozen=True)
class Allocation:
    """A ledger row: one grant with its lifecycle."""

    id: int
    pod: PodRef
    node: NodeRef
    grant: GpuGrant
    status: Status
    decided_at: float
    bound_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    end_reason: str = ""
    policy: str = ""
    # usage rollup from agent reports (bounded: no row per sample)
    obs_count: int = 0
    obs_peak_mib: int = 0
    obs_mean_mib: float = 0.0
    obs_mean_sm: float | None = None


@dataclass(frozen=True)
class Observation:
    """Memory a pod's processes used on one GPU in one report."""

    pod_uid: str
    gpu_uuid: str
    used_mib: int
    sm_util: float | None = None


class AlreadyAllocated(Exception):
    """The pod already has an active allocation (idempotent bind hits this)."""

    def __init__(self, pod_uid: str, node: str) -> None:
        super().__init__(f"pod {pod_uid} already has an active allocation on node {node}")
        self.pod_uid = pod_uid
        self.node = node


class CapacityExceeded(Exception):
    """The ledger refused a grant: the GPU's active grants plus this one exceed its memory.

    Raised inside the decision's write transaction, so nothing of the decision was
    written. Another replica (or writer) took the memory first; the bind answers an
    error naming the GPU and kube-scheduler retries the pod."""

    def __init__(self, gpu_uuid: str, node: str, asked_mib: int, free_mib: int, total_mib: int):
        super().__init__(
            f"GPU {gpu_uuid} on {node}: {free_mib} MiB free of {total_mib} MiB in the ledger,"
            f" {asked_mib} MiB asked"
        )
        self.gpu_uuid, self.node = gpu_uuid, node
        self.asked_mib, self.free_mib, self.total_mib = asked_mib, free_mib, total_mib


class LedgerUnavailable(Exception):
    """The ledger database cannot be written now; binds must fail cleanly.

    ``maybe_written``: the failure came at or after COMMIT, so the write may have reached
    the database although its acknowledgement did not reach us (a caller that holds
    memory for it keeps holding it until the ledger can be asked)."""

    def __init__(self, message: str, maybe_written: bool = False) -> None:
        super().__init__(message)
        self.maybe_written = maybe_written
