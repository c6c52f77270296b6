"""Allocated ResourceClaim -> ledger ``Decision``s, so DRA pods are billed for their devices.

For each ``status.allocation.devices.results[]`` entry the device is looked up in the
ResourceSlices (same driver, pool name and device name, highest pool generation).
Only GPU devices are billed: those with a ``uuid`` attribute and a ``memory``
capacity (other drivers' devices in the same claim, e.g. NICs or ComputeDomain
channels, are skipped), and not ``adminAccess`` results (monitoring access to a device
that is allocated, and billed, to someone else). Per device:

- ``gpu_uuid``/``model``: the ``uuid`` and ``productName`` attributes (a MIG device has
  its own ``MIG-...`` uuid, a ``profile`` and a ``parentUUID``);
- granted memory: ``consumedCapacity.memory`` when present (a shared, consumable
  capacity device: the slice actually granted), else the device's ``memory``;
- the price base: the whole GPU. For a full GPU that is its ``memory``. For a MIG
  device it is the parent GPU's memory, found as (1) the parent device in the slices
  (matched by ``parentUUID``), else (2) the ``memory`` counter of the counter set the
  MIG device consumes (partitionable publishing), else (3) an estimate from its
  ``memorySlice<i>`` capacities assuming the 8 memory slices of A100/H100/H200/B200
  (an A30 has 4: its MIG slices would be billed at half) **[inference]**;
- price = ``gpu_price_per_hour(node)`` x granted / total, or None when the node's price is
  unknown (an unpriced grant, never $0: docs/billing.md);
- ``dra_device``: ``driver/pool/device``, and for a share of a device that allows multiple
  allocations (KEP-5075) ``driver/pool/device/shareID``: each consumer's row names its own
  share, as kubelet's pod-resources API names it (``share_id``).

Shares of one shareable device (each pod with its own claim) are each their own claim
here: one row per consumer with the memory it consumed, so the rows on a GPU add up to
Σ ``consumedCapacity``, as kube-scheduler counted it.

Shared claims: a claim reserved by several pods (``status.reservedFor``) gives every
pod the same devices. Each pod gets its own ``Decision`` for those devices, so that
each pod's lifecycle (bound, running, released) is tracked, but the grant is split
equally between them: each pod's ``price_per_hour`` and ``memory_mib`` is 1/N of the
device's (remainders go to the first pods, so the parts add up exactly). Summed over
the pods, money, GiB-hours and reservations equal one grant, never N. The cost of the
split: when pods come and go the shares are those at ingestion time; re-ingest when
``reservedFor`` changes (the caller releases and records again) to re-split.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from decimal import ROUND_DOWN, Decimal
from typing import Any

from extender.core.allocation import Decision, GpuGrant, NodeRef, PodRef, Sharing
from extender.dra.feasibility import (
    DeviceKey,
    current_devices,
    device_memory_mib,
    device_string,
    device_uuid,
)
from extender.dra.kquantity import quantity_mib_ceil, quantity_mib_floor

POLICY = "dra"
HOSTNAME_LABEL = "kubernetes.io/hostname"
MIG_MEMORY_SLICES = 8  # A100/H100/H200/B200; used only when the parent GPU is not published
_PRICE_STEP = Decimal("1e-12")
_INDEX = re.compile(r"^gpu-(\d+)(?:-|$)")


class ClaimIngestError(ValueError):
    """The claim is allocated but cannot be billed yet (device or node not found)."""


def decisions_from_claim(
    claim: Mapping[str, Any],
    slices: Sequence[Mapping[str, Any]],
    pods: Mapping[str, PodRef],
    node_ref: Callable[[str], NodeRef],
    gpu_price_per_hour: Callable[[str], Decimal | None],
    at: float,
) -> list[Decision]:
    """One Decision per pod in ``status.reservedFor`` for the claim's GPU devices.

    ``pods`` is keyed by pod UID; a reserving pod missing from it gets a PodRef built
    from the reservedFor entry (the claim's namespace). Returns [] while the claim is
    not allocated, not reserved by any pod (not in use yet), or holds no GPU.
    Raises ClaimIngestError when an allocated device is not in the slices or the node
    cannot be told, so the caller retries once its caches catch up.
    """
    status = _map(claim.get("status"))
    results = _list(_map(_map(status.get("allocation")).get("devices")).get("results"))
    reserving = [r for r in _list(status.get("reservedFor")) if _map(r).get("resource") == "pods"]
    if not results or not reserving:
        return []
    ref = claim_ref(claim)
    devices = dict(current_devices(slices))
    node = allocation_node(claim, slices, results)
    price = gpu_price_per_hour(node)
    billable = [_map(r) for r in results if not _map(r).get("adminAccess")]
    grants = _per_gpu(
        [g for r in billable if (g := _grant(r, devices, slices, ref, price)) is not None]
    )
    if not grants:
        return []
    owners = [_pod(_map(r), pods, ref) for r in reserving]
    node_info = node_ref(node)
    return [
        Decision(
            pod=pod,
            node=node_info,
            grants=tuple(_share(g, i, len(owners)) for g in grants),
            decided_at=at,
            policy=POLICY,
        )
        for i, pod in enumerate(owners)
    ]


def claim_ref(claim: Mapping[str, Any]) -> str:
    meta = _map(claim.get("metadata"))
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def allocation_node(
    claim: Mapping[str, Any], slices: Sequence[Mapping[str, Any]], results: list[Any]
) -> str:
    """The node from ``allocation.nodeSelector`` (metadata.name field or hostname label),
    else from the ResourceSlice that published the first allocated device."""
    selector = _map(_map(_map(claim.get("status")).get("allocation")).get("nodeSelector"))
    for term in _list(selector.get("nodeSelectorTerms")):
        name = _in_value(_map(term).get("matchFields"), "metadata.name")
        if name:
            return name
    for s in slices:
        spec = _map(s.get("spec"))
        node = spec.get("nodeName")
        if isinstance(node, str) and node and _publishes(spec, results):
            return node
    for term in _list(selector.get("nodeSelectorTerms")):
        name = _in_value(_map(term).get("matchExpressions"), HOSTNAME_LABEL)
        if name:
            return name
    raise ClaimIngestError(f"claim {claim_ref(claim)}: cannot tell which node it is allocated on")


def _in_value(requirements: Any, key: str) -> str:
    for req in _list(requirements):
        req = _map(req)
        values = _list(req.get("values"))
        if req.get("key") == key and req.get("operator") == "In" and len(values) == 1:
            return str(values[0])
    return ""


def _publishes(spec: Mapping[str, Any], results: list[Any]) -> bool:
    pool = _map(spec.get("pool")).get("name")
    names = {d.get("name") for d in _list(spec.get("devices")) if isinstance(d, Mapping)}
    return any(
        _map(r).get("driver") == spec.get("driver")
        and _map(r).get("pool") == pool
        and _map(r).get("device") in names
        for r in results
    )


def _grant(
    result: Mapping[str, Any],
    devices: Mapping[DeviceKey, Mapping[str, Any]],
    slices: Sequence[Mapping[str, Any]],
    claim: str,
    gpu_price: Decimal | None,
) -> GpuGrant | None:
    key = DeviceKey(
        str(result.get("driver", "")), str(result.get("pool", "")), str(result.get("device", ""))
    )
    device = devices.get(key)
    if device is None:
        raise ClaimIngestError(
            f"claim {claim}: device {'/'.join(key)} is not in any current ResourceSlice"
        )
    uuid, own_mib = device_uuid(device), device_memory_mib(device)
    if uuid is None or own_mib is None:
        return None  # not a GPU: nothing to bill on the memory anchor
    granted = _consumed_mib(result) or own_mib
    profile = device_string(device, "profile") or ""
    total = _gpu_total_mib(device, devices, slices) if profile else own_mib
    price = None if gpu_price is None else gpu_price * Decimal(min(granted, total)) / Decimal(total)
    return GpuGrant(
        gpu_uuid=uuid,
        gpu_index=gpu_index(key.device),
        model=device_string(device, "productName") or "",
        memory_mib=granted,
        gpu_total_mib=total,
        sharing=Sharing.DRA,
        price_per_hour=price,
        mig_profile=profile,
        claim=claim,
        dra_device=dra_device(key, result.get("shareID")),
    )


def _per_gpu(grants: list[GpuGrant]) -> list[GpuGrant]:
    """One grant per GPU: two requests of one claim may take two shares of one shareable
    GPU, and the ledger keeps one row per pod and GPU (memory and price add up; the row
    names both shares)."""
    out: dict[str, GpuGrant] = {}
    for g in grants:
        have = out.get(g.gpu_uuid)
        if have is None:
            out[g.gpu_uuid] = g
            continue
        a, b = have.price_per_hour, g.price_per_hour
        out[g.gpu_uuid] = replace(
            have,
            memory_mib=have.memory_mib + g.memory_mib,
            price_per_hour=None if a is None or b is None else a + b,  # unknown stays unknown
            dra_device=f"{have.dra_device},{g.dra_device}",
        )
    return list(out.values())


def dra_device(key: DeviceKey, share_id: Any = None) -> str:
    """``driver/pool/device``, with ``/shareID`` for a share of a shareable device."""
    return "/".join(key) + (f"/{share_id}" if isinstance(share_id, str) and share_id else "")


def _consumed_mib(result: Mapping[str, Any]) -> int | None:
    consumed = _map(result.get("consumedCapacity"))
    value = next((v for k, v in consumed.items() if str(k).rpartition("/")[2] == "memory"), None)
    try:
        return quantity_mib_ceil(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _gpu_total_mib(
    mig: Mapping[str, Any],
    devices: Mapping[DeviceKey, Mapping[str, Any]],
    slices: Sequence[Mapping[str, Any]],
) -> int:
    """The parent GPU's memory for a MIG device (see the module docstring for the order)."""
    parent = device_string(mig, "parentUUID")
    for device in devices.values():
        if parent and device_uuid(device) == parent and not device_string(device, "profile"):
            total = device_memory_mib(device)
            if total:
                return total
    counted = _counter_set_memory_mib(mig, slices)
    if counted:
        return counted
    own = device_memory_mib(mig) or 1
    occupied = sum(1 for k in _map(mig.get("capacity")) if str(k).startswith("memorySlice"))
    return own * MIG_MEMORY_SLICES // occupied if occupied else own


def _counter_set_memory_mib(mig: Mapping[str, Any], slices: Sequence[Mapping[str, Any]]) -> int:
    wanted = {_map(c).get("counterSet") for c in _list(mig.get("consumesCounters"))}
    for s in slices:
        for counter_set in _list(_map(s.get("spec")).get("sharedCounters")):
            counter_set = _map(counter_set)
            if counter_set.get("name") in wanted:
                value = _map(_map(counter_set.get("counters")).get("memory")).get("value")
                if isinstance(value, str):
                    return quantity_mib_floor(value)
    return 0


def gpu_index(device_name: str) -> int:
    """``gpu-3`` / ``gpu-3-mig-...`` -> 3 (the driver names devices by minor number); else -1.

    The NVIDIA driver no longer publishes an ``index`` attribute; the minor number
    usually, but not always, equals nvidia-smi's index. The UUID is the identity.
    """
    m = _INDEX.match(device_name)
    return int(m.group(1)) if m else -1


def _share(grant: GpuGrant, i: int, n: int) -> GpuGrant:
    """Pod ``i`` of ``n``'s equal part of a grant; parts sum exactly to the whole."""
    if n == 1:
        return grant
    mem = grant.memory_mib // n + (1 if i < grant.memory_mib % n else 0)
    whole = grant.price_per_hour
    if whole is None:  # unpriced: every part is unpriced too
        return replace(grant, memory_mib=mem)
    part = (whole / n).quantize(_PRICE_STEP, rounding=ROUND_DOWN)
    price = whole - part * (n - 1) if i == 0 else part
    return replace(grant, memory_mib=mem, price_per_hour=price)


def _pod(entry: Mapping[str, Any], pods: Mapping[str, PodRef], claim: str) -> PodRef:
    uid = str(entry.get("uid", ""))
    known = pods.get(uid)
    if known is not None:
        return known
    return PodRef(uid=uid, namespace=claim.split("/", 1)[0], name=str(entry.get("name", "")))


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
