"""What a GPU driver hands the agent: plain, immutable data and a tiny interface.

The agent never talks to NVML (or the simulator) directly; it asks a ``GpuDriver`` for
one ``sample()`` and turns the result into a wire report. Keeping the data plain (no
handles, no library objects) is what lets the simulated and the NVML driver be swapped
freely and lets tests build devices by hand.

Units: MiB (integers) for memory, percent (0..100) for utilisation, host PIDs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Health:
    """Whether a device answered NVML sanely; ``reason`` says why not (one line)."""

    healthy: bool = True
    reason: str | None = None


HEALTHY = Health()


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One compute process as the driver sees it (a host PID, never a container PID).

    ``used_mib`` is None when NVML cannot say (``usedGpuMemory`` not available, e.g.
    under some MIG/WDDM/permission setups); ``sm_util`` is None when there are no
    per-process utilisation samples (always the case on MIG).
    """

    pid: int
    used_mib: int | None = None
    sm_util: float | None = None


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG device (GPU instance + compute instance) on a MIG-enabled GPU."""

    uuid: str
    profile: str  # e.g. "1g.10gb"
    memory_total_mib: int
    memory_used_mib: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One physical GPU at one instant.

    ``memory_reserved_mib`` follows NVML v2 memory info: driver/firmware memory that is
    *not* part of ``memory_used_mib`` (total = reserved + used + free). None when only
    v1 memory info is available (then the reserve is hidden inside ``used``).

    On a MIG-enabled GPU the processes live under ``mig`` (per instance), and
    ``processes`` is empty, so nothing is counted twice.
    """

    uuid: str
    index: int
    model: str
    memory_total_mib: int
    memory_used_mib: int
    memory_free_mib: int
    memory_reserved_mib: int | None = None
    utilization_gpu: float | None = None
    mig_enabled: bool = False
    mig: tuple[MigInstance, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    health: Health = field(default=HEALTHY)

    def all_processes(self) -> tuple[GpuProcess, ...]:
        """Every process on this GPU, whether on the whole device or on a MIG slice."""
        if not self.mig:
            return self.processes
        return self.processes + tuple(p for m in self.mig for p in m.processes)


@runtime_checkable
class GpuDriver(Protocol):
    """The one thing the agent needs from a GPU backend.

    ``sample`` must never raise for a per-device problem: a device that errors is
    returned with ``health.healthy = False`` and a reason, so one lost GPU does not hide
    the other seven. ``close`` releases the library (NVML shutdown) and is idempotent.
    """

    name: str  # "nvml" | "simulated"

    def driver_version(self) -> str | None: ...

    def sample(self) -> list[GpuDevice]: ...

    def close(self) -> None: ...
