"""Slot device ids: ``<GPU-UUID>::<k>``, k in 0..slots-1.

Why slots: kubelet counts extended resources in whole devices, so advertising one device
per GPU would forbid two pods sharing a card however much memory it has left. Each GPU
is advertised as N interchangeable slots; the GPU is the part of the id before ``::``,
the same form the NVIDIA plugin's time-slicing replicas use, so tools that read
pod-resources (dcgm-exporter, the agent) map them back to the GPU unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from drivers.gpu.base import GpuDevice

SEP = "::"


def slot_id(gpu_uuid: str, k: int) -> str:
    """The device id of slot ``k`` of ``gpu_uuid``."""
    return f"{gpu_uuid}{SEP}{k}"


def gpu_of(device_id: str) -> str | None:
    """The GPU UUID of a slot id; None when the id is not one of ours."""
    gpu, sep, k = device_id.rpartition(SEP)
    if not sep or not gpu or not k.isdigit():
        return None
    return gpu


@dataclass(frozen=True, slots=True)
class Slot:
    """One advertised device and whether kubelet may hand it out."""

    id: str
    gpu_uuid: str
    healthy: bool


def slots_of(devices: Iterable[GpuDevice], per_gpu: int) -> list[Slot]:
    """The slots a node advertises for its GPUs, in GPU index order.

    A MIG-enabled GPU is left out: a slot means the whole card's memory space, which a
    container cannot get on a card split into MIG instances (MIG is not served here).
    An unhealthy GPU keeps its slots but marks them Unhealthy, so kubelet stops handing
    them out and the node's allocatable shrinks without pods being evicted.
    """
    out: list[Slot] = []
    for dev in sorted(devices, key=lambda d: d.index):
        if dev.mig_enabled:
            continue
        out.extend(Slot(slot_id(dev.uuid, k), dev.uuid, dev.health.healthy) for k in range(per_gpu))
    return out


def gpus_in_order(device_ids: Sequence[str]) -> list[str]:
    """The distinct GPUs of ``device_ids`` in first-seen order (unknown ids skipped)."""
    seen: dict[str, None] = {}
    for d in device_ids:
        g = gpu_of(d)
        if g is not None:
            seen.setdefault(g, None)
    return list(seen)
