"""Evaluate DRA CEL selectors against ResourceSlice devices with cel-python.

The activation mirrors Kubernetes (``k8s.io/dynamic-resource-allocation/cel``):

- ``device.driver``: the slice's ``spec.driver``.
- ``device.attributes[<domain>].<id>`` and ``device.capacity[<domain>].<id>``: a
  qualified name ``domain/id`` goes under its domain; a short name (``productName``)
  goes under the driver's domain (``gpu.nvidia.com``). An unknown domain is an empty
  map; an unknown field is an evaluation error (so the device does not match).
- attribute values: ``int`` -> int, ``bool`` -> bool, ``string`` -> string,
  ``version`` -> ``Semver`` (a real semver type with ``compareTo``/``isGreaterThan``,
  not a string: string order would put ``10.0.0`` before ``9.0.0``); the alpha list
  forms become lists.
- capacity values: ``Quantity`` (``compareTo(quantity('20Gi'))`` etc.).
- ``device.allowMultipleAllocations``: bool.

Parsing and evaluation are celpy's; only the Kubernetes library functions are ours
(``extender.dra.celfuncs``). Compiled programs are cached by expression text. An
expression that fails to compile, fails to evaluate, or yields a non-bool is reported
as an error and the device does not match: callers never see an exception.
Not implemented: ``cel.bind()`` (celpy has no such macro; it fails as an error) and
the apiserver's cost limit (only the 10 Ki length limit is enforced).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
import celpy.celtypes as ct

from extender.dra.celfuncs import FUNCTIONS
from extender.dra.kquantity import Quantity
from extender.dra.semver import Semver

MAX_EXPRESSION_LENGTH = 10 * 1024
_ERROR_LIMIT = 300


@dataclass(frozen=True)
class CelResult:
    """Whether the selectors matched; ``error`` is set when one could not be evaluated."""

    matched: bool
    error: str = ""


class _DomainMap(ct.MapType):
    """``device.attributes`` / ``device.capacity``: an unknown domain is an empty map."""

    def __missing__(self, key: Any) -> ct.MapType:
        return ct.MapType({})


def device_activation(driver: str, device: Mapping[str, Any]) -> dict[str, Any]:
    """The CEL variables for one ResourceSlice device (build once, evaluate many)."""
    attributes = _by_domain(driver, device.get("attributes"), _attribute_value)
    capacity = _by_domain(driver, device.get("capacity"), _capacity_value)
    return {
        "device": ct.MapType(
            {
                ct.StringType("driver"): ct.StringType(driver),
                ct.StringType("attributes"): attributes,
                ct.StringType("capacity"): capacity,
                ct.StringType("allowMultipleAllocations"): ct.BoolType(
                    bool(device.get("allowMultipleAllocations", False))
                ),
            }
        )
    }


def split_qualified(driver: str, name: str) -> tuple[str, str]:
    """``gpu.nvidia.com/type`` -> (gpu.nvidia.com, type); ``type`` -> (driver, type)."""
    domain, sep, ident = name.rpartition("/")
    return (domain, ident) if sep else (driver, name)


def _by_domain(driver: str, raw: Any, convert: Any) -> _DomainMap:
    grouped: dict[str, dict[Any, Any]] = {}
    if isinstance(raw, Mapping):
        # Short names first so a (validation-forbidden) duplicate resolves to the qualified one.
        for name in sorted(raw, key=lambda n: "/" in n):
            value = convert(raw[name])
            if value is None:
                continue  # malformed value: referencing it errors, which is reported
            domain, ident = split_qualified(driver, str(name))
            grouped.setdefault(domain, {})[ct.StringType(ident)] = value
    return _DomainMap({ct.StringType(d): ct.MapType(v) for d, v in grouped.items()})


def _attribute_value(raw: Any) -> Any:
    if not isinstance(raw, Mapping):
        return None
    try:
        if "string" in raw:
            return ct.StringType(str(raw["string"]))
        if "bool" in raw:
            return ct.BoolType(bool(raw["bool"]))
        if "int" in raw:
            return ct.IntType(int(raw["int"]))
        if "version" in raw:
            return Semver.parse(str(raw["version"]))
        return _list_value(raw)
    except (TypeError, ValueError):
        return None


def _list_value(raw: Mapping[str, Any]) -> Any:
    kinds = {"strings": ct.StringType, "bools": ct.BoolType, "ints": ct.IntType}
    for key, cel_type in kinds.items():
        if isinstance(raw.get(key), list):
            return ct.ListType([cel_type(v) for v in raw[key]])
    if isinstance(raw.get("versions"), list):
        versions: list[Any] = [Semver.parse(str(v)) for v in raw["versions"]]
        return ct.ListType(versions)
    return None


def _capacity_value(raw: Any) -> Quantity | None:
    value = raw.get("value") if isinstance(raw, Mapping) else None
    try:
        return Quantity.parse(value) if isinstance(value, str) else None
    except ValueError:
        return None


_PROGRAMS: dict[str, celpy.Runner | str] = {}
_LOCK = threading.Lock()


@functools.cache
def _env() -> celpy.Environment:
    """The CEL parser, built on first use (under ``_LOCK``): building it takes 0.1-0.4 s
    of CPU, which every ``headroom`` command paid at import, claims or not."""
    return celpy.Environment()


def _program(expression: str) -> celpy.Runner | str:
    """The compiled program for an expression, or its compile error (cached either way)."""
    with _LOCK:
        cached = _PROGRAMS.get(expression)
        if cached is None:
            cached = _compile(expression)
            if len(_PROGRAMS) >= 4096:
                _PROGRAMS.clear()
            _PROGRAMS[expression] = cached
        return cached


def _compile(expression: str) -> celpy.Runner | str:
    if len(expression) > MAX_EXPRESSION_LENGTH:
        return f"expression longer than {MAX_EXPRESSION_LENGTH} characters"
    try:
        env = _env()
        return env.program(env.compile(expression), functions=FUNCTIONS)
    except celpy.CELParseError as e:
        return f"does not compile: {_short(e)}"


def evaluate(expression: str, activation: Mapping[str, Any]) -> CelResult:
    """One selector against one device activation; never raises."""
    program = _program(expression)
    if isinstance(program, str):
        return CelResult(False, program)
    try:
        value = program.evaluate(dict(activation))
    except celpy.CELEvalError as e:
        return CelResult(False, _short(e))
    except Exception as e:  # celpy can leak Python errors from odd inputs; report, don't raise
        return CelResult(False, f"{type(e).__name__}: {_short(e)}")
    if not isinstance(value, ct.BoolType):
        return CelResult(False, f"expression yields {type(value).__name__}, not a bool")
    return CelResult(bool(value))


def matches_all(expressions: Iterable[str], activation: Mapping[str, Any]) -> CelResult:
    """Every selector must be true (Kubernetes ANDs them); the first false or error stops."""
    for expression in expressions:
        result = evaluate(expression, activation)
        if not result.matched:
            return CelResult(False, f"{expression!r}: {result.error}" if result.error else "")
    return CelResult(True)


def selector_expressions(selectors: Any) -> list[str]:
    """The CEL texts of a ``selectors: [{cel: {expression}}]`` list (other kinds skipped)."""
    out: list[str] = []
    for selector in selectors if isinstance(selectors, list) else []:
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        if isinstance(cel, Mapping) and isinstance(cel.get("expression"), str):
            out.append(cel["expression"])
    return out


def _short(error: Exception) -> str:
    """celpy errors embed the whole activation; keep the message a person can read."""
    text = str(error.args[0]) if error.args else str(error)
    text = text.split(" (in activation", 1)[0]
    cause = error.args[2] if len(error.args) >= 3 else None
    if isinstance(cause, tuple) and cause:
        detail = ", ".join(_plain(c) for c in cause)
        if detail not in text:
            text += ": " + detail
    text = text.removeprefix("return error for overflow: ")  # celpy's label for any ValueError
    text = " ".join(text.split())
    return text if len(text) <= _ERROR_LIMIT else text[: _ERROR_LIMIT - 1] + "…"


def _plain(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)
