"""Granted vs received: what each grant's pod actually holds, and what that is billed. Pure.

The grant is what the extender decided at bind; what the pod *received* is what kubelet
says it holds (its pod-resources API, read by the node agent). With headroom's device
plugin the two agree by construction; with NVIDIA's stock plugin kubelet picks the
replica and the pod may run on another GPU. The bill follows what was received:

- a granted GPU the pod holds a device on is received as granted (same memory, price);
- a granted GPU the pod holds nothing on is paired, in grant order, with a GPU the pod
  holds that no grant names (GPU X instead of Y). It is billed for the memory granted on
  the GPU received, at that GPU's node price: an exclusive grant the whole of X (its
  memory, the full per-GPU price), a shared grant its granted MiB pro rata of X's
  memory. A MIG grant keeps its memory and price (a MIG slot is priced by its profile,
  which pod-resources does not name);
- a granted GPU nothing is left to pair with has no receipt and stays billed as granted
  (the ledger still holds its memory; nobody else is placed there), and a held GPU no
  grant is left for is not billed: both are ``mismatch`` findings, not charges;
- a DRA grant is received when kubelet lists its device (driver/pool/device) for the pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from extender.core.allocation import Allocation, GpuGrant, Sharing


@dataclass(frozen=True, slots=True)
class Held:
    """What kubelet says one granted pod holds on its node, mapped to GPUs."""

    pod_uid: str
    node: str
    devices: tuple[tuple[str, str], ...]  # (device plugin id, GPU or MIG UUID it names)
    claims: tuple[str, ...] = ()  # DRA devices as "driver/pool/device"

    @property
    def gpus(self) -> tuple[str, ...]:
        """The GPUs held through the device plugin, each once, in kubelet's order."""
        return tuple(dict.fromkeys(g for _, g in self.devices))


@dataclass(frozen=True, slots=True)
class Receipt:
    """What one allocation row received, and what it is billed for."""

    allocation_id: int
    granted_gpu: str
    gpu_uuid: str  # received
    memory_mib: int  # billed
    gpu_total_mib: int  # of the GPU received
    price_per_hour: Decimal | None  # None: unpriced (never $0)
    devices: str  # kubelet's ids for it, comma-separated
    at: float

    @property
    def matches(self) -> bool:
        return self.gpu_uuid == self.granted_gpu


def pair(granted: Sequence[str], held: Sequence[str]) -> list[str | None]:
    """For each granted GPU, the GPU the pod holds in its place: itself when held, else
    the next held GPU no grant names (in kubelet's order), else None."""
    spare = [g for g in held if g not in set(granted)]
    out: list[str | None] = []
    for g in granted:
        out.append(g if g in held else (spare.pop(0) if spare else None))
    return out


def unpaired(granted: Sequence[str], held: Sequence[str]) -> list[str]:
    """Held GPUs left over once every grant took its pair: held, never granted."""
    taken = set(pair(granted, held))
    return [g for g in held if g not in taken]


def pro_rata(per_gpu_hour: Decimal, mib: int, total_mib: int) -> Decimal:
    """A memory slice's price: the GPU's hourly price times the slice's share of it (the
    bind's formula, ``scheduling.bind.grant``)."""
    return per_gpu_hour * (Decimal(mib) / total_mib)


def receipts(
    rows: Sequence[Allocation],
    held: Held,
    per_gpu_hour: Decimal | None,
    totals: Mapping[str, int],
    at: float,
) -> list[Receipt]:
    """The receipt of each active row of one pod that kubelet's answer settles.

    ``per_gpu_hour`` and ``totals`` (MiB per GPU UUID) are the node's as the ledger
    records them: what a GPU received instead of the granted one is priced by."""
    out: list[Receipt] = []
    plugin_rows = [a for a in rows if a.grant.sharing != Sharing.DRA]
    if held.devices:
        got = pair([a.grant.gpu_uuid for a in plugin_rows], held.gpus)
        for a, gpu in zip(plugin_rows, got, strict=True):
            if gpu is not None:
                ids = ",".join(i for i, g in held.devices if g == gpu)
                out.append(_receipt(a, gpu, ids, per_gpu_hour, totals.get(gpu), at))
    for a in rows:
        if a.grant.sharing == Sharing.DRA and a.grant.dra_device in held.claims:
            out.append(_receipt(a, a.grant.gpu_uuid, a.grant.dra_device, None, None, at))
    return out


def _receipt(
    a: Allocation,
    gpu: str,
    devices: str,
    per_gpu_hour: Decimal | None,
    total: int | None,
    at: float,
) -> Receipt:
    g = a.grant
    if gpu == g.gpu_uuid or g.sharing in (Sharing.MIG, Sharing.DRA):
        mib, total_mib, price = g.memory_mib, g.gpu_total_mib, g.price_per_hour
    else:
        mib, total_mib, price = _instead(g, per_gpu_hour, total)
    return Receipt(a.id, g.gpu_uuid, gpu, mib, total_mib, price, devices, at)


def _instead(
    g: GpuGrant, per_gpu_hour: Decimal | None, total: int | None
) -> tuple[int, int, Decimal | None]:
    """Memory, GPU size and price of a grant served on another GPU of ``total`` MiB."""
    if total is None or total <= 0:  # the ledger does not know that GPU: unpriced
        return g.memory_mib, g.gpu_total_mib, None
    mib = total if g.sharing == Sharing.EXCLUSIVE else min(g.memory_mib, total)
    price = None if per_gpu_hour is None else pro_rata(per_gpu_hour, mib, total)
    return mib, total, price
