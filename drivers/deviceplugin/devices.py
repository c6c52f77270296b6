"""The advertised slots and their health, refreshed from the GPU driver.

Why a poller with a version counter: ListAndWatch is a long-lived stream per kubelet
connection, and kubelet only learns of a GPU going bad when a new list is sent. One
thread samples the driver every interval; each stream waits on the condition and sends
the list again only when it changed, so a healthy node costs kubelet nothing.
"""

from __future__ import annotations

import logging
import threading

from drivers.deviceplugin.slots import Slot, slots_of
from drivers.gpu.base import GpuDriver

log = logging.getLogger("headroom.deviceplugin")


class DeviceState:
    """Thread-safe slot list with change notification."""

    def __init__(self, driver: GpuDriver, per_gpu: int) -> None:
        if per_gpu < 1:
            raise ValueError("slots per GPU must be at least 1")
        self.driver = driver
        self.per_gpu = per_gpu
        self._cond = threading.Condition()
        self._slots: list[Slot] = []
        self._version = 0
        self.refresh()

    def refresh(self) -> bool:
        """Sample the driver once; True when the advertised list changed.

        A driver that raises (NVML lost altogether) marks every known slot Unhealthy
        rather than withdrawing them: kubelet then stops allocating them but keeps the
        running pods' records.
        """
        try:
            slots = slots_of(self.driver.sample(), self.per_gpu)
        except Exception as e:
            log.warning("GPU driver sample failed (%s); marking every slot Unhealthy", e)
            slots = [Slot(s.id, s.gpu_uuid, False) for s in self.snapshot()[1]]
        with self._cond:
            if slots == self._slots:
                return False
            self._slots = slots
            self._version += 1
            self._cond.notify_all()
        bad = sorted({s.gpu_uuid for s in slots if not s.healthy})
        log.info("advertising %d slots; unhealthy GPUs: %s", len(slots), bad or "none")
        return True

    def snapshot(self) -> tuple[int, list[Slot]]:
        with self._cond:
            return self._version, list(self._slots)

    def gpus(self) -> set[str]:
        """GPUs this node advertises (healthy or not)."""
        return {s.gpu_uuid for s in self.snapshot()[1]}

    def wait_change(self, version: int, timeout: float) -> tuple[int, list[Slot]]:
        """Block until the list is newer than ``version`` or ``timeout`` passes."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version, timeout=timeout)
            return self._version, list(self._slots)

    def poll_forever(self, interval_s: float, stop: threading.Event) -> None:
        """The poller thread's body: refresh every ``interval_s`` until ``stop``."""
        while not stop.wait(interval_s):
            self.refresh()
