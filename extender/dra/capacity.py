"""Consumable capacity (KEP-5075): what a request takes of a device that may be shared.

A ResourceSlice device with ``allowMultipleAllocations: true`` can be allocated to
several requests at once; each allocation *consumes* part of the device's capacities
(``capacity.<name>.value``) and the sum over its allocations never exceeds them. The
amount a request consumes is computed as kube-scheduler's allocator does
(``k8s.io/dynamic-resource-allocation/structured``, the ``requestPolicy`` rules of
``resource.k8s.io/v1``):

- a capacity the request names (``exactly.capacity.requests.<name>``): the asked amount,
  raised to the policy's next valid value (``validValues``: the smallest one not below
  it; ``validRange``: at least ``min``, then up to ``min + n*step``); above
  ``validValues``' largest or ``validRange.max`` the device cannot serve the request;
- a capacity the request does not name: the policy's ``default``, else the whole value.

On a device that does *not* allow multiple allocations a capacity request is only a
filter (the device must have at least that much) and the device is taken whole.
Amounts are exact ``Decimal``s (the apiserver compares ``inf.Dec`` exactly).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Decimal
from typing import Any

from extender.core.quantity import parse_quantity

Amounts = dict[str, Decimal]  # capacity short name -> amount


def shareable(device: Mapping[str, Any]) -> bool:
    """The device may be allocated to several requests at once."""
    return device.get("allowMultipleAllocations") is True


def short(name: Any) -> str:
    """``gpu.nvidia.com/memory`` -> ``memory`` (capacity names are driver-qualified or not)."""
    return str(name).rpartition("/")[2]


def requested(spec: Mapping[str, Any]) -> Amounts:
    """A request's ``capacity.requests`` as exact amounts; ValueError names a bad entry."""
    raw = spec.get("capacity")
    asks = raw.get("requests") if isinstance(raw, Mapping) else None
    if not isinstance(asks, Mapping):
        return {}
    out: Amounts = {}
    for name, text in asks.items():
        try:
            out[short(name)] = parse_quantity(str(text))
        except ValueError as e:
            raise ValueError(f"capacity.requests.{name}: {e}") from None
    return out


def consumption(device: Mapping[str, Any], asked: Amounts) -> Amounts | str:
    """What an allocation of this shareable device for ``asked`` consumes, per capacity;
    or why the device cannot serve the request (a policy violated, a capacity missing)."""
    capacities = _capacities(device)
    missing = sorted(set(asked) - set(capacities))
    if missing:
        return f"has no capacity {', '.join(missing)}"
    out: Amounts = {}
    for name, (value, policy) in capacities.items():
        amount = _by_policy(asked.get(name), value, policy)
        if amount is None:
            return f"{name}: {_shown(asked[name])} is outside the device's requestPolicy"
        out[name] = amount
    return out


def room(
    device: Mapping[str, Any], asked: Amounts, consumed: Mapping[str, Decimal]
) -> Amounts | str:
    """The consumption, when it fits beside what ``consumed`` already holds of the device;
    else why not ("memory: 20Gi asked, 14Gi of 24Gi left")."""
    amounts = consumption(device, asked)
    if isinstance(amounts, str):
        return amounts
    capacities = _capacities(device)
    for name, amount in amounts.items():
        value = capacities[name][0]
        left = value - consumed.get(name, Decimal(0))
        if amount > left:
            left = max(left, Decimal(0))
            return f"{name}: {_shown(amount)} asked, {_shown(left)} of {_shown(value)} left"
    return amounts


def covers(device: Mapping[str, Any], asked: Amounts) -> str:
    """A device taken whole: "" when it has at least ``asked`` of each capacity, else why not."""
    capacities = _capacities(device)
    for name, amount in asked.items():
        have = capacities.get(name)
        if have is None:
            return f"has no capacity {name}"
        if have[0] < amount:
            return f"{name}: {_shown(amount)} asked, the device has {_shown(have[0])}"
    return ""


def consumed_by(results: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], Amounts]:
    """Σ ``consumedCapacity`` per (driver, pool, device) over allocation results."""
    out: dict[tuple[str, str, str], Amounts] = {}
    for r in results:
        used = r.get("consumedCapacity")
        if not isinstance(used, Mapping) or not used:
            continue
        key = (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
        sums = out.setdefault(key, {})
        for name, text in used.items():
            try:
                amount = parse_quantity(str(text))
            except ValueError:
                continue  # the apiserver validated it; an unreadable one counts nothing
            sums[short(name)] = sums.get(short(name), Decimal(0)) + amount
    return out


def add(into: Amounts, amounts: Mapping[str, Decimal]) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, Decimal(0)) + amount


def _capacities(device: Mapping[str, Any]) -> dict[str, tuple[Decimal, Mapping[str, Any]]]:
    raw = device.get("capacity")
    out: dict[str, tuple[Decimal, Mapping[str, Any]]] = {}
    for name, entry in raw.items() if isinstance(raw, Mapping) else []:
        if not isinstance(entry, Mapping):
            continue
        try:
            value = parse_quantity(str(entry.get("value")))
        except ValueError:
            continue
        policy = entry.get("requestPolicy")
        out[short(name)] = (value, policy if isinstance(policy, Mapping) else {})
    return out


def _by_policy(asked: Decimal | None, value: Decimal, policy: Mapping[str, Any]) -> Decimal | None:
    """The amount consumed for ``asked`` (None: not named by the request); None back
    when the policy refuses it."""
    if asked is None:
        default = _quantity(policy.get("default"))
        return default if default is not None else value
    valid = [q for v in policy.get("validValues") or [] if (q := _quantity(v)) is not None]
    if valid:
        return next((v for v in sorted(valid) if v >= asked), None)
    span = policy.get("validRange")
    if isinstance(span, Mapping):
        return _in_range(asked, span)
    return asked


def _in_range(asked: Decimal, span: Mapping[str, Any]) -> Decimal | None:
    low = _quantity(span.get("min")) or Decimal(0)
    high, step = _quantity(span.get("max")), _quantity(span.get("step"))
    amount = max(asked, low)
    if step is not None and step > 0:
        steps = ((amount - low) / step).to_integral_value(rounding=ROUND_CEILING)
        amount = low + steps * step  # a share is never rounded down
    return None if high is not None and amount > high else amount


def _quantity(value: Any) -> Decimal | None:
    if value is None:
        return None
    try:
        return parse_quantity(str(value))
    except ValueError:
        return None


def _shown(amount: Decimal) -> str:
    """Bytes as the largest binary unit that divides them (``20Gi``), else plain."""
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if amount >= size and amount % size == 0:
            return f"{int(amount // size)}{unit}"
    return str(amount.normalize()) if amount != amount.to_integral_value() else str(int(amount))
