"""A seeded, in-memory GPU node for demos, the extender's simulator, and tests.

It behaves like NVML where that matters to headroom: each GPU has a total, a fixed
driver reserve that shows up in *used* but belongs to no process, and compute
processes whose memory adds up to the rest. Pods "run" by starting processes on GPUs
and allocate/free memory over time (``set_usage`` or seeded ``step`` drift). Because its
PIDs are not real, it is also its own attributor (``attribute``): pid -> pod.

Everything is deterministic for a given (seed, node): GPU UUIDs, PIDs, container ids and
the drift sequence, so a failing demo or test can be replayed exactly.
"""

from __future__ import annotations

import hashlib
import random
import threading
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass

from drivers.attribution.pods import Attribution, unmapped
from drivers.gpu.base import GpuDevice, GpuProcess
from drivers.gpu.spec import GpuSpec, parse_gpu_spec
from extender.wire.clock import Clock, SystemClock

DEFAULT_RESERVE_MIB = 256
"""Driver/context memory NVML counts as used on an idle GPU (order of magnitude of a
real card with persistence mode on); reported as unattributed."""

DEFAULT_DRIFT = 0.05
"""Standard deviation of one ``step`` move, as a fraction of the process's base usage."""

DRIFT_BOUND = 0.5
"""A drifting process stays within base * (1 +/- DRIFT_BOUND)."""


class SimulatedOutOfMemory(ValueError):
    """Raised when a process would need more memory than the simulated GPU has left,
    the way cudaMalloc fails on a real card instead of overcommitting."""


@dataclass(slots=True)
class _Process:
    pid: int
    pod_uid: str
    container_id: str
    gpu_uuid: str
    base_mib: int
    used_mib: int
    sm_util: float | None
    started_at: float


@dataclass(frozen=True, slots=True)
class _Gpu:
    uuid: str
    index: int
    model: str
    memory_mib: int


class SimulatedDriver:
    """``GpuDriver`` over simulated GPUs; thread-safe (the agent samples while a
    simulator thread starts and ends pods)."""

    name = "simulated"

    def __init__(
        self,
        specs: Sequence[GpuSpec] | str,
        seed: int = 0,
        node: str = "n1",
        clock: Clock | None = None,
        *,
        reserve_mib: int = DEFAULT_RESERVE_MIB,
        drift: float = DEFAULT_DRIFT,
    ) -> None:
        gpu_specs = parse_gpu_spec(specs) if isinstance(specs, str) else list(specs)
        if not gpu_specs:
            raise ValueError("a simulated node needs at least one GPU")
        self.seed = seed
        self.node = node
        self.reserve_mib = reserve_mib
        self.drift = drift
        self._clock: Clock = clock or SystemClock()
        self._rng = random.Random(_digest(f"rng/{seed}/{node}"))
        self._gpus = {
            g.uuid: g
            for g in (
                _Gpu(_gpu_uuid(seed, node, i), i, s.model, s.memory_mib)
                for i, s in enumerate(gpu_specs)
            )
        }
        for g in self._gpus.values():
            if g.memory_mib <= reserve_mib:
                raise ValueError(f"GPU {g.index} ({g.memory_mib} MiB) is smaller than the reserve")
        self._procs: dict[int, _Process] = {}
        self._next_pid = 10_000 + self._rng.randrange(50_000)
        self._lock = threading.Lock()

    # -- the GpuDriver interface -------------------------------------------------

    def driver_version(self) -> str | None:
        return "simulated"

    def sample(self) -> list[GpuDevice]:
        with self._lock:
            return [self._device(g) for g in self._gpus.values()]

    def close(self) -> None:
        """Nothing to release; present so the simulator is a drop-in ``GpuDriver``."""

    # -- the simulator's API -------------------------------------------------------

    @property
    def gpu_uuids(self) -> list[str]:
        return list(self._gpus)

    def start_process(
        self,
        pod_uid: str,
        gpu_uuid: str,
        used_mib: int,
        sm_util: float | None = None,
        container_id: str | None = None,
    ) -> int:
        """Start a compute process of ``pod_uid`` on ``gpu_uuid``; returns its PID."""
        if used_mib < 0:
            raise ValueError("used_mib must be >= 0")
        with self._lock:
            gpu = self._gpu(gpu_uuid)
            self._check_fits(gpu, extra_mib=used_mib)
            pid = self._next_pid
            self._next_pid += 1
            # One container per pod by default: its processes share the container id.
            cid = container_id or _digest_hex(f"ctr/{self.seed}/{self.node}/{pod_uid}")
            self._procs[pid] = _Process(
                pid=pid,
                pod_uid=pod_uid,
                container_id=cid,
                gpu_uuid=gpu.uuid,
                base_mib=used_mib,
                used_mib=used_mib,
                sm_util=sm_util,
                started_at=self._clock.now(),
            )
            return pid

    def set_usage(self, pid: int, used_mib: int, sm_util: float | None = None) -> None:
        """Move a process to ``used_mib`` (an allocation or a free); it becomes the new
        base that ``step`` drifts around."""
        if used_mib < 0:
            raise ValueError("used_mib must be >= 0")
        with self._lock:
            proc = self._process(pid)
            self._check_fits(self._gpus[proc.gpu_uuid], extra_mib=used_mib - proc.used_mib)
            proc.used_mib = proc.base_mib = used_mib
            if sm_util is not None:
                proc.sm_util = sm_util

    def end_process(self, pid: int) -> None:
        with self._lock:
            self._process(pid)
            del self._procs[pid]

    def end_pod(self, pod_uid: str) -> int:
        """End every process of a pod (the pod finished or was deleted); returns how many."""
        with self._lock:
            pids = [p.pid for p in self._procs.values() if p.pod_uid == pod_uid]
            for pid in pids:
                del self._procs[pid]
            return len(pids)

    def processes_of(self, pod_uid: str) -> list[int]:
        with self._lock:
            return [p.pid for p in self._procs.values() if p.pod_uid == pod_uid]

    def step(self) -> None:
        """Let every running process allocate or free a little (seeded noise).

        Usage stays within base * (1 +/- DRIFT_BOUND) and never beyond what the GPU has
        free, so the simulated device can never report more used than total.
        """
        with self._lock:
            for proc in self._procs.values():
                self._drift(proc)

    def attribute(self, pid: int) -> Attribution:
        """The simulator's pid -> pod table (its PIDs do not exist in /proc)."""
        with self._lock:
            proc = self._procs.get(pid)
            if proc is None:
                return unmapped("process gone")
            return Attribution(pod_uid=proc.pod_uid, container_id=proc.container_id)

    # -- internals -----------------------------------------------------------------

    def _device(self, gpu: _Gpu) -> GpuDevice:
        procs = [p for p in self._procs.values() if p.gpu_uuid == gpu.uuid]
        used = self.reserve_mib + sum(p.used_mib for p in procs)
        utils = [p.sm_util for p in procs if p.sm_util is not None]
        return GpuDevice(
            uuid=gpu.uuid,
            index=gpu.index,
            model=gpu.model,
            memory_total_mib=gpu.memory_mib,
            memory_used_mib=used,
            memory_free_mib=gpu.memory_mib - used,
            memory_reserved_mib=0,
            utilization_gpu=min(100.0, float(sum(utils))),
            processes=tuple(GpuProcess(p.pid, p.used_mib, p.sm_util) for p in procs),
        )

    def _drift(self, proc: _Process) -> None:
        gpu = self._gpus[proc.gpu_uuid]
        free = gpu.memory_mib - self._used_on(gpu.uuid)
        lo = int(proc.base_mib * (1 - DRIFT_BOUND))
        hi = min(int(proc.base_mib * (1 + DRIFT_BOUND)), proc.used_mib + free)
        move = round(self._rng.gauss(0.0, self.drift * max(proc.base_mib, 1)))
        proc.used_mib = max(lo, min(hi, proc.used_mib + move))
        if proc.sm_util is not None:
            proc.sm_util = max(0.0, min(100.0, proc.sm_util + self._rng.gauss(0.0, 2.0)))

    def _used_on(self, gpu_uuid: str) -> int:
        return self.reserve_mib + sum(
            p.used_mib for p in self._procs.values() if p.gpu_uuid == gpu_uuid
        )

    def _check_fits(self, gpu: _Gpu, extra_mib: int) -> None:
        if extra_mib <= 0:
            return
        free = gpu.memory_mib - self._used_on(gpu.uuid)
        if extra_mib > free:
            raise SimulatedOutOfMemory(
                f"GPU {gpu.index} ({gpu.uuid}) has {free} MiB free, {extra_mib} MiB asked"
            )

    def _gpu(self, gpu_uuid: str) -> _Gpu:
        try:
            return self._gpus[gpu_uuid]
        except KeyError:
            raise ValueError(f"unknown simulated GPU {gpu_uuid!r}") from None

    def _process(self, pid: int) -> _Process:
        try:
            return self._procs[pid]
        except KeyError:
            raise ValueError(f"no simulated process with pid {pid}") from None


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _digest_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _gpu_uuid(seed: int, node: str, index: int) -> str:
    """A stable, real-looking NVML UUID ("GPU-xxxxxxxx-...") from seed, node and index."""
    raw = hashlib.sha256(f"gpu/{seed}/{node}/{index}".encode()).digest()[:16]
    return f"GPU-{uuidlib.UUID(bytes=raw)}"
