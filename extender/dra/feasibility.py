"""Would a ResourceClaim fit on one node's devices? A pure check for filter and scoring.

The DRA scheduler plugin is the authority; this lets the extender explain and score
claim pods without repeating the apiserver round trips. It follows the allocator:

- a device is a candidate when it is not already allocated, is not tainted with
  ``NoSchedule``/``NoExecute`` (unless the request tolerates the taint), and every
  DeviceClass selector and request selector evaluates to true (``extender.dra.cel``;
  an expression error means "no match" and the error is reported in ``reason``);
- ``ExactCount`` takes ``count`` (default 1) candidates; ``All`` needs every matching
  device free and at least one of them;
- ``firstAvailable`` takes the first subrequest that fits; the result names it
  ``<request>/<subrequest>`` as DRA does;
- ``adminAccess`` is ignored (the request is treated like any other);
- consumable capacity (``extender.dra.capacity``): a device that allows multiple
  allocations stays a candidate while what the request consumes (by its
  ``requestPolicy``) fits beside what other claims' ``consumedCapacity`` and this claim's
  earlier requests hold of it; a device that does not is taken whole, and
  ``capacity.requests`` is then only a filter.

Greedy, first fit: devices are taken in slice order, request by request, with no
backtracking. DRA itself picks the first device set that fits and does not score, so
this agrees with it for the usual one-request GPU claims. With several requests whose
selectors overlap, the real allocator (which backtracks) can find a set this misses:
such a ``fits=False`` is a "probably not", never the place to enforce a decision.
Not modelled: ``constraints`` (matchAttribute/distinctAttribute) and counter sets
(partitionable devices).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

from extender.dra.capacity import Amounts, add, covers, requested, room, shareable
from extender.dra.cel import device_activation, matches_all, selector_expressions
from extender.dra.kquantity import quantity_mib_floor

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


class DeviceKey(NamedTuple):
    driver: str
    pool: str
    device: str


class Picked(NamedTuple):
    request: str  # "<request>" or "<request>/<subrequest>"
    driver: str
    pool: str
    device: str
    consumed: Mapping[str, Decimal] | None = None  # a share of a shareable device; None: whole


Consumed = Mapping[DeviceKey, Mapping[str, Decimal]]


@dataclass(frozen=True)
class Fit:
    fits: bool
    reason: str  # why not, for FailedNodes and events ("" when it fits)
    devices: list[Picked] = field(default_factory=list)


@dataclass
class _Candidate:
    key: DeviceKey
    device: Mapping[str, Any]
    _activation: dict[str, Any] | None = None

    @property
    def activation(self) -> dict[str, Any]:
        """Built on first use: most devices of a busy node are never evaluated."""
        if self._activation is None:
            self._activation = device_activation(self.key.driver, self.device)
        return self._activation


def claim_fits(
    requests: Sequence[Mapping[str, Any]],
    device_classes: Mapping[str, Mapping[str, Any]],
    slices: Sequence[Mapping[str, Any]],
    allocated: set[tuple[str, str, str]],
    consumed: Consumed | None = None,
) -> Fit:
    """Whether ``requests`` (a claim's ``spec.devices.requests``) fit on these slices.

    ``slices`` are one node's ResourceSlices; older pool generations are dropped here
    too, so passing a pool's whole history is safe. ``allocated`` holds the
    (driver, pool, device) triples other claims already hold; ``consumed`` what they
    consume of shareable devices (Σ ``consumedCapacity``).
    """
    candidates = [_Candidate(k, d) for k, d in current_devices(slices)]
    taken = {DeviceKey(*t) for t in allocated}
    usage = _Usage(taken, {k: dict(v) for k, v in (consumed or {}).items()})
    picked: list[Picked] = []
    for request in requests:
        outcome = _fit_request(request, device_classes, candidates, usage)
        if isinstance(outcome, str):
            return Fit(False, outcome, picked)
        picked += outcome
        usage.hold(outcome)
    return Fit(True, "", picked)


@dataclass
class _Usage:
    """What is held of the node's devices: whole (``taken``) and shares (``consumed``)."""

    taken: set[DeviceKey]
    consumed: dict[DeviceKey, Amounts]

    def free(self, c: _Candidate) -> bool:
        """Not held whole; a shareable device is never held whole (its shares are counted)."""
        return shareable(c.device) or c.key not in self.taken

    def room(self, c: _Candidate, asked: Amounts) -> Amounts | str | None:
        """The share the request would consume (a shareable device), None (taken whole),
        or why the device cannot serve it."""
        if shareable(c.device):
            return room(c.device, asked, self.consumed.get(c.key, {}))
        return covers(c.device, asked) or None

    def hold(self, picks: list[Picked]) -> None:
        for p in picks:
            key = DeviceKey(p.driver, p.pool, p.device)
            if p.consumed is None:
                self.taken.add(key)
            else:
                add(self.consumed.setdefault(key, {}), p.consumed)


def _fit_request(
    request: Mapping[str, Any],
    classes: Mapping[str, Mapping[str, Any]],
    candidates: Sequence[_Candidate],
    usage: _Usage,
) -> list[Picked] | str:
    """The devices for one request, or why it does not fit."""
    name = str(request.get("name", ""))
    reasons: list[str] = []
    for label, spec in _alternatives(name, request):
        outcome = _fit_exact(label, spec, classes, candidates, usage)
        if not isinstance(outcome, str):
            return outcome
        reasons.append(outcome)
    if not reasons:
        return f"request {name!r}: has neither exactly nor firstAvailable"
    return " | ".join(reasons)


def _alternatives(name: str, request: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    if isinstance(request.get("exactly"), Mapping):
        return [(name, request["exactly"])]
    subs = request.get("firstAvailable")
    if isinstance(subs, list):
        return [(f"{name}/{s.get('name', '')}", s) for s in subs if isinstance(s, Mapping)]
    return []


def _fit_exact(
    label: str,
    spec: Mapping[str, Any],
    classes: Mapping[str, Mapping[str, Any]],
    candidates: Sequence[_Candidate],
    usage: _Usage,
) -> list[Picked] | str:
    class_name = str(spec.get("deviceClassName", ""))
    device_class = classes.get(class_name)
    if device_class is None:
        return f"request {label!r}: DeviceClass {class_name!r} not found"
    try:
        asked = requested(spec)
    except ValueError as e:
        return f"request {label!r}: {e}"
    expressions = [
        *selector_expressions(_spec(device_class).get("selectors")),
        *selector_expressions(spec.get("selectors")),
    ]
    raw_tolerations = spec.get("tolerations")
    tolerations: list[Any] = raw_tolerations if isinstance(raw_tolerations, list) else []
    if spec.get("allocationMode", "ExactCount") == "All":
        matching, errors = _matching(candidates, expressions, tolerations)
        free = [c for c in matching if usage.free(c) and not isinstance(usage.room(c, asked), str)]
        return _all(label, class_name, matching, free, errors, usage, asked)
    count = spec.get("count", 1)
    return _exact_count(
        label, class_name, count, expressions, tolerations, candidates, usage, asked
    )


def _all(
    label: str,
    class_name: str,
    matching: list[_Candidate],
    free: list[_Candidate],
    errors: list[str],
    usage: _Usage,
    asked: Amounts,
) -> list[Picked] | str:
    if not matching:
        return _why(label, f"no device of class {class_name!r} matches", errors)
    if len(free) < len(matching):
        return _why(
            label,
            f"asks for all {len(matching)} matching devices, "
            f"{len(matching) - len(free)} already allocated",
            errors,
        )
    return [_pick(label, c, usage.room(c, asked)) for c in free]


def _exact_count(
    label: str,
    class_name: str,
    count: Any,
    expressions: list[str],
    tolerations: list[Any],
    candidates: Sequence[_Candidate],
    usage: _Usage,
    asked: Amounts,
) -> list[Picked] | str:
    """First ``count`` free matching devices with room for the request; only free
    devices are evaluated on success."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return f"request {label!r}: count {count!r} is not a positive integer"
    free = [c for c in candidates if usage.free(c)]
    short: list[str] = []  # matching devices without room for the request, and why

    def has_room(c: _Candidate) -> bool:
        share = usage.room(c, asked)
        if isinstance(share, str):
            short.append(f"{c.key.device}: {share}")
        return not isinstance(share, str)

    chosen, errors = _matching(free, expressions, tolerations, limit=count, usable=has_room)
    if len(chosen) == count:
        return [_pick(label, c, usage.room(c, asked)) for c in chosen]
    # Allocated devices are not evaluated: on a full node that is where the time would go.
    return _why(
        label,
        f"needs {count} device(s) of class {class_name!r}; {len(chosen)} of "
        f"{len(free)} free device(s) match ({len(candidates) - len(free)} allocated)",
        errors,
        short,
    )


def _matching(
    candidates: Sequence[_Candidate],
    expressions: list[str],
    tolerations: list[Any],
    limit: int | None = None,
    usable: Callable[[_Candidate], bool] = lambda c: True,
) -> tuple[list[_Candidate], list[str]]:
    """Usable devices passing every selector (stopping at ``limit``), and selector errors."""
    out: list[_Candidate] = []
    errors: list[str] = []
    for c in candidates:
        if limit is not None and len(out) >= limit:
            break
        if _blocked(c.device, tolerations):
            continue
        result = matches_all(expressions, c.activation)
        if result.matched and usable(c):
            out.append(c)
        elif result.error:
            errors.append(f"{c.key.device}: {result.error}")
    return out, errors


def _why(label: str, text: str, errors: list[str], short: list[str] | None = None) -> str:
    detail = f" (selector errors: {'; '.join(errors[:3])})" if errors else ""
    if short:
        detail += f" (no room on: {'; '.join(short[:3])})"
    return f"request {label!r}: {text}{detail}"


def _pick(label: str, c: _Candidate, share: Amounts | str | None = None) -> Picked:
    consumed = share if isinstance(share, dict) else None
    return Picked(label, c.key.driver, c.key.pool, c.key.device, consumed)


def _blocked(device: Mapping[str, Any], tolerations: list[Any]) -> bool:
    """A NoSchedule/NoExecute taint the request does not tolerate keeps the device out."""
    for taint in device.get("taints") or []:
        if taint.get("effect") in BLOCKING_EFFECTS and not any(
            _tolerates(t, taint) for t in tolerations if isinstance(t, Mapping)
        ):
            return True
    return False


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """core/v1 toleration semantics, as DRA reuses them for device taints."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    key = toleration.get("key", "")
    if key and key != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return bool(key) and toleration.get("value", "") == taint.get("value", "")


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def current_slices(slices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Only the slices of each (driver, pool) at its highest generation, in input order."""
    slices = list(slices)
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        pool_key, gen = _pool(s)
        newest[pool_key] = max(newest.get(pool_key, gen), gen)
    return [s for s in slices if _pool(s)[1] == newest[_pool(s)[0]]]


def _pool(s: Mapping[str, Any]) -> tuple[tuple[str, str], int]:
    spec = _spec(s)
    raw_pool = spec.get("pool")
    pool: Mapping[str, Any] = raw_pool if isinstance(raw_pool, Mapping) else {}
    generation = pool.get("generation", 0)
    return (str(spec.get("driver", "")), str(pool.get("name", ""))), (
        generation if isinstance(generation, int) else 0
    )


def current_devices(
    slices: Iterable[Mapping[str, Any]],
) -> list[tuple[DeviceKey, Mapping[str, Any]]]:
    """Every device of the current generation, keyed by (driver, pool, device name)."""
    out: list[tuple[DeviceKey, Mapping[str, Any]]] = []
    for s in current_slices(slices):
        (driver, pool), _ = _pool(s)
        for device in _spec(s).get("devices") or []:
            if isinstance(device, Mapping) and isinstance(device.get("name"), str):
                out.append((DeviceKey(driver, pool, device["name"]), device))
    return out


def _named(mapping: Any, short: str) -> Any:
    """``mapping[short]``, else a qualified ``<domain>/short`` entry (driver domain)."""
    if not isinstance(mapping, Mapping):
        return None
    if short in mapping:
        return mapping[short]
    return next((v for k, v in mapping.items() if str(k).rpartition("/")[2] == short), None)


def device_memory_mib(device: Mapping[str, Any]) -> int | None:
    """The device's ``memory`` capacity in whole MiB (rounded down), or None."""
    entry = _named(device.get("capacity"), "memory")
    value = entry.get("value") if isinstance(entry, Mapping) else None
    try:
        return quantity_mib_floor(value) if isinstance(value, str) else None
    except ValueError:
        return None


def device_uuid(device: Mapping[str, Any]) -> str | None:
    """The ``uuid`` string attribute (``GPU-...`` or ``MIG-...``), or None."""
    return device_string(device, "uuid")


def device_string(device: Mapping[str, Any], name: str) -> str | None:
    entry = _named(device.get("attributes"), name)
    value = entry.get("string") if isinstance(entry, Mapping) else None
    return value if isinstance(value, str) else None
