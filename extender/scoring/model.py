"""Plain data that scoring and placement work on: snapshots and demands, no I/O, no locks.

The views are rebuilt on every report and there are one per node and GPU: frozen
msgspec structs outside the cyclic garbage collector (``gc=False``; they hold only
numbers, strings and tuples of each other, so no cycles), which keeps a full collection
of a 5,000-node inventory from pausing the scheduling path (docs/BENCHMARKS.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

import msgspec

# The top of the extender protocol's priority range (``extender.wire.protocol.MAX_PRIORITY``,
# which a test holds equal): scoring answers 0..MAX_PRIORITY without importing the wire.
MAX_PRIORITY = 10


class Overrun(msgspec.Struct, frozen=True, gc=False):
    """A pod the last report saw using more of a GPU than it was granted there (a leak:
    granted nothing), so the excess is part of the GPU's committed memory. Kept on the
    view so a refusal can name who took the memory, not just how little is left."""

    pod: str  # "namespace/name" when the extender knows the pod, else its UID
    used_mib: int
    granted_mib: int  # 0: a leak, the pod holds no grant on this GPU

    @property
    def excess_mib(self) -> int:
        return self.used_mib - self.granted_mib


class GpuView(msgspec.Struct, frozen=True, gc=False):
    """One schedulable GPU (or MIG instance) as scoring sees it.

    ``committed_mib`` = Σ over granted pods of max(granted, used) + memory of pods
    using it without a grant + unattributed memory (``extender.state.committed``):
    memory nobody new may take, since a granted pod may grow into its slice at any time
    and an overrunning pod already holds more than its slice.
    """

    uuid: str
    index: int
    model: str
    total_mib: int
    committed_mib: int
    reserved_mib: int = 0  # by active grants (ledger), a part of committed
    mig_profile: str = ""  # non-empty: a MIG instance, granted whole by profile
    parent_total_mib: int = 0  # a MIG instance's parent GPU (its price is a share of it)
    overruns: tuple[Overrun, ...] = ()  # part of committed, largest excess first

    def free_mib(self, margin_mib: int) -> int:
        """Headroom = total - committed - safety margin (may be negative)."""
        return self.total_mib - self.committed_mib - margin_mib

    def idle(self, idle_mib: int) -> bool:
        """Nobody holds it: no grant and no more than driver/context memory in use."""
        return self.reserved_mib == 0 and self.committed_mib <= idle_mib


class NodeView(msgspec.Struct, frozen=True, gc=False):
    name: str
    gpus: tuple[GpuView, ...]
    capacity_type: str = ""
    instance_type: str = ""
    price_per_gib_hour: float | None = None  # None: price unknown
    version: int = 0  # changes whenever anything above changes (cache key)
    # The whole node (kube-scheduler's NodeResourcesFit arithmetic): allocatable and the
    # requests of every pod on it. 0 allocatable: not known, so never a constraint.
    cpu_allocatable_milli: int = 0
    cpu_requested_milli: int = 0
    memory_allocatable_mib: int = 0
    memory_requested_mib: int = 0

    @property
    def total_mib(self) -> int:
        return sum(g.total_mib for g in self.gpus)

    @property
    def committed_mib(self) -> int:
        return sum(min(g.committed_mib, g.total_mib) for g in self.gpus)

    @property
    def model(self) -> str:
        """The node's GPU model (its lowest-index plain GPU's), canonical; "" if none."""
        plain = [g for g in self.gpus if not g.mig_profile]
        return canonical_model(min(plain, key=lambda g: g.index).model) if plain else ""

    def host_room(self, cpu_milli: int, memory_mib: int) -> str:
        """ "" if a pod with these requests fits the node's CPU and memory (unknown
        allocatable never refuses), else what is short, as NodeResourcesFit says it."""
        short = []
        if self.cpu_allocatable_milli and (
            self.cpu_requested_milli + cpu_milli > self.cpu_allocatable_milli
        ):
            free = self.cpu_allocatable_milli - self.cpu_requested_milli
            short.append(f"cpu {cpu_milli}m asked, {max(free, 0)}m free")
        if self.memory_allocatable_mib and (
            self.memory_requested_mib + memory_mib > self.memory_allocatable_mib
        ):
            free = self.memory_allocatable_mib - self.memory_requested_mib
            short.append(f"memory {memory_mib} MiB asked, {max(free, 0)} MiB free")
        return "insufficient " + "; ".join(short) if short else ""


def canonical_model(name: str) -> str:
    """A GPU model as node labels spell it (``nvidia.com/gpu.product``: NVML's name with
    spaces as dashes), so a pod's allowed models and a node's GPUs compare equal."""
    return name.strip().replace(" ", "-")


class CapacityPref(StrEnum):
    ANY = "any"
    SPOT = "spot"
    ON_DEMAND = "on-demand"


class Shape(NamedTuple):
    """A workload shape (FGD's task type): what one pod of it needs of a node. The host
    fields default to nothing asked, so ``(count, memory, profile)`` is a shape too."""

    gpus: int
    memory_mib: int | None  # per GPU; None: each GPU whole
    mig_profile: str = ""
    cpu_milli: int = 0
    host_memory_mib: int = 0
    models: frozenset[str] = frozenset()  # allowed GPU models (canonical); empty: any


# a mix entry may also be written (gpus, memory, profile): no host needs, any model
ShapeLike = Shape | tuple[int, int | None, str]


@dataclass(frozen=True, slots=True)
class GpuDemand:
    """GPUs one pod needs. ``memory_mib is None`` means each GPU whole (exclusive).
    ``extender.state.demand.demand_of`` reads it from a pod. ``cpu_milli`` and
    ``host_memory_mib`` are the pod's requests as kube-scheduler counts them, ``models``
    the GPU models its node affinity allows (empty: any)."""

    count: int
    memory_mib: int | None = None
    mig_profile: str = ""
    capacity: CapacityPref = CapacityPref.ANY
    dra_claims: tuple[str, ...] = ()
    cpu_milli: int = 0
    host_memory_mib: int = 0
    models: frozenset[str] = frozenset()

    @property
    def wants_gpu(self) -> bool:
        return self.count > 0 or bool(self.dra_claims)

    @property
    def key(self) -> Shape:
        """The shape that scoring depends on (cache key, workload-mix bucket)."""
        return Shape(
            self.count,
            self.memory_mib,
            self.mig_profile,
            self.cpu_milli,
            self.host_memory_mib,
            self.models,
        )


@dataclass(frozen=True, slots=True)
class Limits:
    """Tunables shared by fit and policies."""

    margin_mib: int = 512  # safety margin kept free on every GPU
    idle_mib: int = 1024  # a GPU using no more than this (and ungranted) counts as free
