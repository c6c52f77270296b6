"""NVML driver against a fake NVML: pynvml's functions are replaced at the module
boundary, and errors are pynvml's own exception classes, so the classification code
sees exactly what it would see on a node."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from drivers.gpu.nvml import NvmlDriver, NvmlInitError

GiB = 1024**3
MiB = 1024**2


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass
class FakeMig:
    uuid: str
    name: str
    total: int
    used: int
    gi: int
    ci: int
    slices: int = 1
    procs: list[tuple[int, int | None]] = field(default_factory=list)


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    total: int = 80 * GiB
    used: int = 10 * GiB
    reserved: int = 512 * MiB
    memory_v2: int | None = None  # None: supported; else the NVML error code it raises
    util: int = 42
    mig_mode: int | None = None  # None: NotSupported (pre-Ampere); 0/1 disabled/enabled
    migs: list[FakeMig | None] = field(default_factory=list)  # None: empty slot
    procs: list[tuple[int, int | None]] = field(default_factory=list)
    mps_procs: list[tuple[int, int | None]] = field(default_factory=list)
    samples: list[tuple[int, int, int]] = field(default_factory=list)  # pid, ts, smUtil
    fail: dict[str, int] = field(default_factory=dict)  # call name -> NVML error code


class FakeNvml:
    """Installs fake pynvml functions; records calls for assertions."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.calls: list[tuple[str, Any]] = []
        self.init_error: int | None = None
        self.count_error: int | None = None
        self.shutdowns = 0

    def install(self, mp: pytest.MonkeyPatch) -> FakeNvml:
        for name in dir(self):
            if name.startswith("nvml"):
                mp.setattr(pynvml, name, getattr(self, name))
        return self

    # handles are the fake objects themselves
    def _check(self, call: str, h: Any) -> None:
        self.calls.append((call, h))
        code = getattr(h, "fail", {}).get(call)
        if code is not None:
            raise nvml_error(code)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise nvml_error(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.133.20"

    def nvmlDeviceGetCount(self) -> int:
        if self.count_error is not None:
            raise nvml_error(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        gpu = self.gpus[i]
        self._check("nvmlDeviceGetHandleByIndex", gpu)
        return gpu

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        self._check("nvmlDeviceGetUUID", h)
        return h.uuid

    def nvmlDeviceGetName(self, h: Any) -> str:
        self._check("nvmlDeviceGetName", h)
        return h.name

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> Any:
        self._check("nvmlDeviceGetMemoryInfo", h)
        if isinstance(h, FakeMig):
            return SimpleNamespace(total=h.total, used=h.used, free=h.total - h.used, reserved=0)
        if version is not None:
            assert version == pynvml.nvmlMemory_v2
            if h.memory_v2 is not None:
                raise nvml_error(h.memory_v2)
            free = h.total - h.used - h.reserved
            return SimpleNamespace(total=h.total, reserved=h.reserved, free=free, used=h.used)
        # v1: the reserve is inside "used"
        used = h.used + h.reserved
        return SimpleNamespace(total=h.total, used=used, free=h.total - used)

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        self._check("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=h.util, memory=10)

    def nvmlDeviceGetMigMode(self, h: Any) -> list[int]:
        self._check("nvmlDeviceGetMigMode", h)
        if h.mig_mode is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [h.mig_mode, h.mig_mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        self._check("nvmlDeviceGetMaxMigDeviceCount", h)
        return len(h.migs)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, i: int) -> FakeMig:
        self._check("nvmlDeviceGetMigDeviceHandleByIndex", h)
        mig = h.migs[i]
        if mig is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return mig

    def nvmlDeviceGetAttributes(self, h: FakeMig) -> Any:
        self._check("nvmlDeviceGetAttributes", h)
        return SimpleNamespace(memorySizeMB=h.total // MiB, gpuInstanceSliceCount=h.slices)

    def nvmlDeviceGetGpuInstanceId(self, h: FakeMig) -> int:
        return h.gi

    def nvmlDeviceGetComputeInstanceId(self, h: FakeMig) -> int:
        return h.ci

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        self._check("nvmlDeviceGetComputeRunningProcesses", h)
        return [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in h.procs]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h: Any) -> list[Any]:
        self._check("nvmlDeviceGetMPSComputeRunningProcesses", h)
        return [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in getattr(h, "mps_procs", [])]

    def nvmlDeviceGetProcessUtilization(self, h: Any, since: int) -> list[Any]:
        self._check("nvmlDeviceGetProcessUtilization", h)
        fresh = [s for s in h.samples if s[1] > since]
        if not fresh:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)  # what NVML says for "no samples"
        return [SimpleNamespace(pid=p, timeStamp=ts, smUtil=u) for p, ts, u in fresh]


def driver_with(mp: pytest.MonkeyPatch, *gpus: FakeGpu) -> tuple[NvmlDriver, FakeNvml]:
    fake = FakeNvml(list(gpus)).install(mp)
    return NvmlDriver(), fake


# --- a healthy, non-MIG GPU ------------------------------------------------------


def test_reads_memory_v2_processes_and_utilisation(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(
        "GPU-aaaa",
        procs=[(100, 4 * GiB), (200, None)],  # pid 200: NVML cannot say (usedGpuMemory None)
        samples=[(100, 10, 30), (100, 20, 50), (200, 20, 5)],
    )
    driver, _ = driver_with(monkeypatch, gpu)
    (dev,) = driver.sample()
    assert (dev.uuid, dev.index, dev.model) == ("GPU-aaaa", 0, "NVIDIA H100 80GB HBM3")
    assert dev.memory_total_mib == 81920
    assert dev.memory_used_mib == 10240 and dev.memory_reserved_mib == 512
    assert dev.memory_free_mib == 81920 - 10240 - 512
    assert dev.utilization_gpu == 42.0
    assert not dev.mig_enabled and dev.mig == ()
    by_pid = {p.pid: p for p in dev.processes}
    assert by_pid[100].used_mib == 4096 and by_pid[100].sm_util == 40.0  # mean of samples
    assert by_pid[200].used_mib is None and by_pid[200].sm_util == 5.0
    assert dev.health.healthy and dev.health.reason is None
    assert driver.driver_version() == "570.133.20"


def test_not_available_sentinel_means_unknown_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu("GPU-a", procs=[(7, 2**64 - 1)])
    driver, _ = driver_with(monkeypatch, gpu)
    assert driver.sample()[0].processes[0].used_mib is None


def test_process_utilisation_asks_only_for_new_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu("GPU-a", procs=[(1, GiB)], samples=[(1, 100, 60)])
    driver, _ = driver_with(monkeypatch, gpu)
    assert driver.sample()[0].processes[0].sm_util == 60.0
    # No sample newer than timestamp 100: NVML answers NotFound -> "no samples", not an error.
    (dev,) = driver.sample()
    assert dev.processes[0].sm_util is None and dev.health.healthy
    gpu.samples.append((1, 200, 10))
    assert driver.sample()[0].processes[0].sm_util == 10.0


def test_mps_clients_are_merged_with_compute_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu("GPU-a", procs=[(1, GiB)], mps_procs=[(2, 2 * GiB), (1, GiB)])
    driver, _ = driver_with(monkeypatch, gpu)
    assert {(p.pid, p.used_mib) for p in driver.sample()[0].processes} == {(1, 1024), (2, 2048)}


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND]
)
def test_memory_v2_falls_back_to_v1(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    driver, _ = driver_with(monkeypatch, FakeGpu("GPU-a", memory_v2=code))
    (dev,) = driver.sample()
    assert dev.memory_reserved_mib is None
    assert dev.memory_used_mib == 10240 + 512  # v1 hides the reserve inside used
    assert dev.health.healthy


@pytest.mark.parametrize(
    ("call", "code"),
    [
        ("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_NOT_SUPPORTED),
        ("nvmlDeviceGetName", pynvml.NVML_ERROR_NOT_SUPPORTED),
        ("nvmlDeviceGetMPSComputeRunningProcesses", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND),
        ("nvmlDeviceGetProcessUtilization", pynvml.NVML_ERROR_NOT_SUPPORTED),
        ("nvmlDeviceGetComputeRunningProcesses", pynvml.NVML_ERROR_NO_PERMISSION),
        ("nvmlDeviceGetProcessUtilization", pynvml.NVML_ERROR_NO_PERMISSION),
    ],
)
def test_unsupported_optional_fields_are_absent_not_errors(
    monkeypatch: pytest.MonkeyPatch, call: str, code: int
) -> None:
    gpu = FakeGpu("GPU-a", procs=[(1, GiB)], samples=[(1, 5, 70)], fail={call: code})
    driver, _ = driver_with(monkeypatch, gpu)
    (dev,) = driver.sample()
    assert dev.health.healthy
    if call == "nvmlDeviceGetUtilizationRates":
        assert dev.utilization_gpu is None
    elif call == "nvmlDeviceGetName":
        assert dev.model == "unknown"
    elif call == "nvmlDeviceGetComputeRunningProcesses":
        assert dev.processes == ()
    elif call == "nvmlDeviceGetProcessUtilization":
        assert dev.processes[0].sm_util is None
    else:
        assert [p.pid for p in dev.processes] == [1]


# --- unhealthy devices -------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "code", "name"),
    [
        ("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_GPU_IS_LOST, "NVMLError_GpuIsLost"),
        ("nvmlDeviceGetComputeRunningProcesses", pynvml.NVML_ERROR_UNKNOWN, "NVMLError_Unknown"),
        ("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_TIMEOUT, "NVMLError_Timeout"),
        ("nvmlDeviceGetMigMode", pynvml.NVML_ERROR_RESET_REQUIRED, "NVMLError_ResetRequired"),
        ("nvmlDeviceGetUUID", pynvml.NVML_ERROR_NO_PERMISSION, "NVMLError_NoPermission"),
        ("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_NOT_SUPPORTED, "NVMLError_NotSupported"),
        ("nvmlDeviceGetProcessUtilization", pynvml.NVML_ERROR_GPU_IS_LOST, "NVMLError_GpuIsLost"),
    ],
)
def test_device_errors_mark_only_that_device_unhealthy(
    monkeypatch: pytest.MonkeyPatch, call: str, code: int, name: str
) -> None:
    good = FakeGpu("GPU-good", procs=[(1, GiB)])
    bad = FakeGpu("GPU-bad", procs=[(2, GiB)], samples=[(2, 1, 1)], fail={call: code})
    driver, _ = driver_with(monkeypatch, good, bad)
    first, second = driver.sample()
    assert first.health.healthy and first.uuid == "GPU-good"
    assert not second.health.healthy
    assert second.health.reason is not None
    assert name in second.health.reason and call in second.health.reason
    # nothing to schedule on a device we cannot read
    assert second.memory_free_mib == 0
    assert second.memory_used_mib == second.memory_total_mib


def test_lost_gpu_keeps_its_known_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu("GPU-keep")
    driver, _ = driver_with(monkeypatch, gpu)
    driver.sample()
    gpu.fail["nvmlDeviceGetHandleByIndex"] = pynvml.NVML_ERROR_GPU_IS_LOST
    (dev,) = driver.sample()
    assert (dev.uuid, dev.model, dev.memory_total_mib) == ("GPU-keep", gpu.name, 81920)
    assert not dev.health.healthy


def test_never_seen_gpu_gets_a_placeholder_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu("GPU-x", fail={"nvmlDeviceGetHandleByIndex": pynvml.NVML_ERROR_UNKNOWN})
    driver, _ = driver_with(monkeypatch, gpu)
    (dev,) = driver.sample()
    assert dev.uuid == "GPU-unknown-0" and not dev.health.healthy


def test_error_code_pynvml_does_not_know_is_still_classified(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver, _ = driver_with(monkeypatch, FakeGpu("GPU-a", fail={"nvmlDeviceGetName": 4242}))
    (dev,) = driver.sample()
    assert not dev.health.healthy
    assert dev.health.reason is not None and "NVMLError" in dev.health.reason


def test_device_count_failure_reports_known_devices_unhealthy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver, fake = driver_with(monkeypatch, FakeGpu("GPU-a"), FakeGpu("GPU-b"))
    driver.sample()
    fake.count_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    devs = driver.sample()
    assert [d.uuid for d in devs] == ["GPU-a", "GPU-b"]
    assert all(not d.health.healthy for d in devs)
    assert all("nvmlDeviceGetCount" in (d.health.reason or "") for d in devs)


def test_non_nvml_surprise_does_not_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    driver, _ = driver_with(monkeypatch, FakeGpu("GPU-a"))

    def broken(h: Any, version: int | None = None) -> Any:
        raise AttributeError("struct changed shape")

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", broken)
    (dev,) = driver.sample()
    assert not dev.health.healthy
    assert dev.health.reason == "internal error: AttributeError: struct changed shape"


# --- MIG -----------------------------------------------------------------------------


def mig_gpu() -> FakeGpu:
    return FakeGpu(
        "GPU-mig",
        name="NVIDIA A100-SXM4-40GB",
        total=40 * GiB,
        mig_mode=pynvml.NVML_DEVICE_MIG_ENABLE,
        migs=[
            FakeMig("MIG-1", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 4864 * MiB, GiB, 7, 0,
                    procs=[(11, GiB)]),
            None,  # empty slot: NotFound
            FakeMig("MIG-3", "NVIDIA A100-SXM4-40GB MIG 3g.20gb", 19968 * MiB, 0, 2, 0),
        ],
        procs=[(11, GiB)],  # the parent handle lists it too: must not be counted twice
        samples=[(11, 1, 99)],
    )  # fmt: skip


def test_mig_instances_with_processes_and_empty_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    driver, fake = driver_with(monkeypatch, mig_gpu())
    (dev,) = driver.sample()
    assert dev.health.healthy and dev.mig_enabled
    assert dev.utilization_gpu is None  # not available on MIG
    assert dev.processes == ()
    assert [(m.uuid, m.profile, m.memory_total_mib, m.gpu_instance_id) for m in dev.mig] == [
        ("MIG-1", "1g.5gb", 4864, 7),
        ("MIG-3", "3g.20gb", 19968, 2),
    ]
    assert [(p.pid, p.used_mib, p.sm_util) for p in dev.mig[0].processes] == [(11, 1024, None)]
    assert dev.all_processes() == dev.mig[0].processes
    called = {c for c, _ in fake.calls}
    assert "nvmlDeviceGetUtilizationRates" not in called
    assert "nvmlDeviceGetProcessUtilization" not in called


def test_mig_profile_from_attributes_when_the_name_lacks_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpu = mig_gpu()
    first = gpu.migs[0]
    assert first is not None
    first.name = "NVIDIA A100-SXM4-40GB"
    driver, _ = driver_with(monkeypatch, gpu)
    assert driver.sample()[0].mig[0].profile == "1g.5gb"  # 4864 MiB rounds to 5 GB


def test_mig_disabled_is_a_plain_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu("GPU-a", mig_mode=0, procs=[(1, GiB)])
    driver, _ = driver_with(monkeypatch, gpu)
    (dev,) = driver.sample()
    assert not dev.mig_enabled and [p.pid for p in dev.processes] == [1]


def test_mig_handle_error_other_than_not_found_is_unhealthy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpu = mig_gpu()
    gpu.fail["nvmlDeviceGetMigDeviceHandleByIndex"] = pynvml.NVML_ERROR_GPU_IS_LOST
    driver, _ = driver_with(monkeypatch, gpu)
    (dev,) = driver.sample()
    assert not dev.health.healthy
    assert "NVMLError_GpuIsLost" in (dev.health.reason or "")


# --- init and shutdown ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
            "NVML init failed: driver not loaded (NVMLError_DriverNotLoaded) — is this a GPU "
            "node with the NVIDIA driver and the device mounted?",
        ),
        (
            pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
            "NVML init failed: libnvidia-ml.so.1 not found (NVMLError_LibraryNotFound) — is "
            "this a GPU node with the NVIDIA driver and the device mounted?",
        ),
        (
            pynvml.NVML_ERROR_INSUFFICIENT_POWER,
            "NVML init failed: Insufficient External Power (NVMLError_InsufficientPower) — is "
            "this a GPU node with the NVIDIA driver and the device mounted?",
        ),
    ],
)
def test_init_failure_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, code: int, message: str
) -> None:
    fake = FakeNvml([]).install(monkeypatch)
    fake.init_error = code
    with pytest.raises(NvmlInitError) as info:
        NvmlDriver()
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_close_shuts_nvml_down_once(monkeypatch: pytest.MonkeyPatch) -> None:
    driver, fake = driver_with(monkeypatch, FakeGpu("GPU-a"))
    driver.close()
    driver.close()
    assert fake.shutdowns == 1
