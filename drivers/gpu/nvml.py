"""NVML driver (nvidia-ml-py, imported as ``pynvml``).

Every NVML error is classified, because one GPU falling off the bus must not take the
agent (and the other GPUs' reports) down with it:

* ``NotSupported`` / ``FunctionNotFound`` on an optional query -> the field is absent
  (None / empty). ``NoPermission`` on an optional query (processes, utilisation) -> also
  absent, logged once: the device is fine, the agent just cannot see that detail.
* ``NotFound`` where NVML uses it for "nothing there": process utilisation (no samples
  since the last timestamp) and MIG handles (an empty slot).
* anything else on a device (``GpuIsLost``, ``Unknown``, ``Timeout``, ...) or any error on
  a required query (UUID, memory) -> that device is reported unhealthy with the call and
  the error as the reason. Its memory is reported as fully used, so a consumer that
  forgets to look at ``healthy`` still sees no headroom there.

``nvmlInit`` failing is not per-device: it raises ``NvmlInitError`` with one line a
person can act on. The driver module keeps only identities between samples (UUID,
model, total per index) so a GPU that is lost keeps its UUID in reports.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any, NoReturn

import pynvml

from drivers.gpu.base import GpuDevice, GpuProcess, Health, MigInstance

log = logging.getLogger("headroom.agent.nvml")

MiB = 1024 * 1024
_NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong
_MAX_REASON = 240
_INIT_HINT = "is this a GPU node with the NVIDIA driver and the device mounted?"
_INIT_WHAT = {
    "NVMLError_DriverNotLoaded": "driver not loaded",
    "NVMLError_LibraryNotFound": "libnvidia-ml.so.1 not found",
    "NVMLError_NoPermission": "no permission to open the GPU device files",
    "NVMLError_LibRmVersionMismatch": "NVML library and kernel driver versions differ",
    "NVMLError_GpuIsLost": "a GPU is lost (fell off the bus)",
    "NVMLError_IrqIssue": "interrupt problem talking to the driver",
    "NVMLError_Uninitialized": "library not initialised",
}
_PROFILE_IN_NAME = re.compile(r"(\d+g\.\d+gb(?:\+\w+)*)", re.IGNORECASE)


class NvmlInitError(RuntimeError):
    """NVML could not start; the message is a single actionable line."""


class DeviceError(Exception):
    """An NVML call failed in a way that makes the device unhealthy (carries the reason)."""


def error_name(err: BaseException) -> str:
    return type(err).__name__


def describe(call: str, err: BaseException) -> str:
    """``"<call>: <message> (<class>)"``, safe even for codes pynvml has no text for."""
    try:
        text = str(err)
    except Exception:  # str() of an unknown code asks the (maybe unloaded) library
        text = ""
    text = text or "error"
    return f"{call}: {text} ({error_name(err)})"[:_MAX_REASON]


def init_failure_message(err: BaseException) -> str:
    name = error_name(err)
    what = _INIT_WHAT.get(name)
    if what is None:
        try:
            what = str(err) or "unknown error"
        except Exception:
            what = "unknown error"
    return f"NVML init failed: {what} ({name}) — {_INIT_HINT}"


def _is(err: BaseException, *names: str) -> bool:
    return error_name(err) in names


_ABSENT = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound")


class NvmlDriver:
    """``GpuDriver`` over the local NVIDIA driver."""

    name = "nvml"

    def __init__(self) -> None:
        try:
            pynvml.nvmlInit()
        except Exception as e:  # NVMLError or a loader surprise: one clear line either way
            raise NvmlInitError(init_failure_message(e)) from None
        self._open = True
        self._version: str | None = None
        self._identity: dict[int, tuple[str, str, int]] = {}  # index -> uuid, model, total
        self._util_ts: dict[str, int] = {}  # uuid -> last process-util sample timestamp
        self._warned: set[tuple[str, str]] = set()

    # -- GpuDriver ---------------------------------------------------------------

    def driver_version(self) -> str | None:
        if self._version is None:
            try:
                self._version = _text(pynvml.nvmlSystemGetDriverVersion())
            except pynvml.NVMLError:
                return None
        return self._version

    def sample(self) -> list[GpuDevice]:
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as e:
            reason = describe("nvmlDeviceGetCount", e)
            return [self._unhealthy(i, reason) for i in sorted(self._identity)]
        return [self._sample_device(i) for i in range(count)]

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as e:
            log.warning("nvmlShutdown failed: %s", describe("nvmlShutdown", e))

    # -- one device --------------------------------------------------------------

    def _sample_device(self, index: int) -> GpuDevice:
        try:
            return self._read_device(index)
        except DeviceError as e:
            return self._unhealthy(index, str(e))
        except Exception as e:  # a pynvml surprise must not kill the agent
            log.exception("unexpected error reading GPU %d", index)
            return self._unhealthy(index, f"internal error: {type(e).__name__}: {e}"[:_MAX_REASON])

    def _read_device(self, index: int) -> GpuDevice:
        handle = _call("nvmlDeviceGetHandleByIndex", index)
        uuid = _text(_call("nvmlDeviceGetUUID", handle))
        name = self._optional("nvmlDeviceGetName", handle)
        model = _text(name) if name is not None else "unknown"
        total, used, free, reserved = _memory(handle)
        self._identity[index] = (uuid, model, total)
        mig_enabled = self._mig_enabled(handle)
        if mig_enabled:
            mig = tuple(self._mig_instances(handle))
            processes: tuple[GpuProcess, ...] = ()
            utilization = None  # NVML does not report utilisation on MIG
        else:
            mig = ()
            processes = self._processes(handle, uuid, with_util=True)
            rates = self._optional("nvmlDeviceGetUtilizationRates", handle)
            utilization = float(rates.gpu) if rates is not None else None
        return GpuDevice(
            uuid=uuid,
            index=index,
            model=model,
            memory_total_mib=total,
            memory_used_mib=used,
            memory_free_mib=free,
            memory_reserved_mib=reserved,
            utilization_gpu=utilization,
            mig_enabled=mig_enabled,
            mig=mig,
            processes=processes,
        )

    def _unhealthy(self, index: int, reason: str) -> GpuDevice:
        uuid, model, total = self._identity.get(index, (f"GPU-unknown-{index}", "unknown", 0))
        return GpuDevice(
            uuid=uuid,
            index=index,
            model=model,
            memory_total_mib=total,
            memory_used_mib=total,  # no headroom on a device we cannot read
            memory_free_mib=0,
            health=Health(healthy=False, reason=reason[:_MAX_REASON]),
        )

    # -- processes ---------------------------------------------------------------

    def _processes(self, handle: Any, uuid: str, *, with_util: bool) -> tuple[GpuProcess, ...]:
        used: dict[int, int | None] = {}
        for call in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetMPSComputeRunningProcesses",
        ):
            # MPS clients only appear in the MPS list; the compute list shows the server.
            for info in self._optional(call, handle, permission_absent=True) or ():
                pid = int(info.pid)
                mib = _process_mib(getattr(info, "usedGpuMemory", None))
                if used.get(pid) is None:
                    used[pid] = mib
        sm = self._process_sm_util(handle, uuid) if with_util and used else {}
        return tuple(GpuProcess(pid=p, used_mib=m, sm_util=sm.get(p)) for p, m in used.items())

    def _process_sm_util(self, handle: Any, uuid: str) -> dict[int, float]:
        """Mean SM utilisation per PID over the samples since the previous call."""
        since = self._util_ts.get(uuid, 0)
        samples = self._optional(
            "nvmlDeviceGetProcessUtilization",
            handle,
            since,
            permission_absent=True,
            not_found_absent=True,
        )
        if not samples:
            return {}
        sums: dict[int, list[float]] = defaultdict(list)
        for s in samples:
            sums[int(s.pid)].append(float(s.smUtil))
            since = max(since, int(s.timeStamp))
        self._util_ts[uuid] = since
        return {pid: sum(v) / len(v) for pid, v in sums.items()}

    # -- MIG ---------------------------------------------------------------------

    def _mig_enabled(self, handle: Any) -> bool:
        mode = self._optional("nvmlDeviceGetMigMode", handle)
        return mode is not None and int(mode[0]) == pynvml.NVML_DEVICE_MIG_ENABLE

    def _mig_instances(self, handle: Any) -> list[MigInstance]:
        count = int(_call("nvmlDeviceGetMaxMigDeviceCount", handle))
        instances = []
        for slot in range(count):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError as e:
                if _is(e, "NVMLError_NotFound"):
                    continue  # empty slot
                _raise_device("nvmlDeviceGetMigDeviceHandleByIndex", e)
            instances.append(self._mig_instance(mig))
        return instances

    def _mig_instance(self, mig: Any) -> MigInstance:
        uuid = _text(_call("nvmlDeviceGetUUID", mig))
        total, used, _free, _reserved = _memory(mig)
        attrs = self._optional("nvmlDeviceGetAttributes", mig)
        name = self._optional("nvmlDeviceGetName", mig)
        return MigInstance(
            uuid=uuid,
            profile=_mig_profile(_text(name) if name is not None else "", attrs),
            memory_total_mib=total,
            memory_used_mib=used,
            gpu_instance_id=self._optional("nvmlDeviceGetGpuInstanceId", mig),
            compute_instance_id=self._optional("nvmlDeviceGetComputeInstanceId", mig),
            processes=self._processes(mig, uuid, with_util=False),
        )

    # -- error classification ----------------------------------------------------

    def _optional(
        self,
        call: str,
        *args: Any,
        permission_absent: bool = False,
        not_found_absent: bool = False,
    ) -> Any:
        """Call NVML; None where the answer is "not here"; DeviceError otherwise."""
        try:
            return getattr(pynvml, call)(*args)
        except pynvml.NVMLError as e:
            if _is(e, *_ABSENT):
                return None
            if not_found_absent and _is(e, "NVMLError_NotFound"):
                return None
            if permission_absent and _is(e, "NVMLError_NoPermission"):
                self._warn_once(call, describe(call, e))
                return None
            _raise_device(call, e)

    def _warn_once(self, call: str, message: str) -> None:
        key = (call, message)
        if key not in self._warned:
            self._warned.add(key)
            log.warning("NVML detail unavailable (reported as absent): %s", message)


def _call(call: str, *args: Any) -> Any:
    """A required NVML query: any error makes the device unhealthy."""
    fn: Callable[..., Any] = getattr(pynvml, call)
    try:
        return fn(*args)
    except pynvml.NVMLError as e:
        _raise_device(call, e)


def _raise_device(call: str, err: BaseException) -> NoReturn:
    raise DeviceError(describe(call, err)) from err


def _memory(handle: Any) -> tuple[int, int, int, int | None]:
    """(total, used, free, reserved) in MiB; v2 (reserved split out of used) when the
    driver has it, v1 (reserved hidden in used, so None) otherwise."""
    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            m = pynvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            return m.total // MiB, m.used // MiB, m.free // MiB, m.reserved // MiB
        except pynvml.NVMLError as e:
            if not _is(e, *_ABSENT, "NVMLError_ArgumentVersionMismatch"):
                _raise_device("nvmlDeviceGetMemoryInfo_v2", e)
    m = _call("nvmlDeviceGetMemoryInfo", handle)
    return m.total // MiB, m.used // MiB, m.free // MiB, None


def _process_mib(used_bytes: int | None) -> int | None:
    if used_bytes is None or used_bytes >= _NOT_AVAILABLE:
        return None
    return int(used_bytes) // MiB


def _mig_profile(name: str, attrs: Any) -> str:
    """The MIG profile ("1g.10gb"): from the MIG device name when NVML puts it there
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), else from the slice count and memory."""
    m = _PROFILE_IN_NAME.search(name)
    if m:
        return m.group(1).lower()
    if attrs is not None:
        gb = round(int(attrs.memorySizeMB) / 1024)
        return f"{int(attrs.gpuInstanceSliceCount)}g.{gb}gb"
    return "unknown"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
