"""CEL extension functions Kubernetes adds for DRA selectors, registered with celpy.

Kubernetes' DRA CEL environment includes its quantity library (``quantity()``,
``isQuantity()``, Quantity methods) and semver library (``semver()``, ``isSemver()``,
Semver methods). cel-python has neither. celpy calls a method ``x.f(y)`` as the
function ``f(x, y)``, so each name below is one function that dispatches on the
receiver's type. A wrong receiver raises TypeError, which celpy turns into a CEL
"no such overload" error (the device then does not match and the error is reported).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import celpy.celtypes as ct
import re2

from extender.dra.kquantity import Quantity
from extender.dra.semver import Semver

_INT64_MAX = 2**63 - 1


def _comparable(a: Any, b: Any) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return a.compare(b)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.compare(b)
    raise TypeError(f"cannot compare {type(a).__name__} with {type(b).__name__}")


def compare_to(a: Any, b: Any) -> ct.IntType:
    return ct.IntType(_comparable(a, b))


def is_greater_than(a: Any, b: Any) -> ct.BoolType:
    return ct.BoolType(_comparable(a, b) > 0)


def is_less_than(a: Any, b: Any) -> ct.BoolType:
    return ct.BoolType(_comparable(a, b) < 0)


def _quantity(q: Any) -> Quantity:
    if not isinstance(q, Quantity):
        raise TypeError(f"expected a Quantity, got {type(q).__name__}")
    return q


def quantity(text: Any) -> Quantity:
    return Quantity.parse(str(text)) if isinstance(text, str) else _not_string(text)


def is_quantity(text: Any) -> ct.BoolType:
    try:
        quantity(text)
    except ValueError:
        return ct.BoolType(False)
    return ct.BoolType(True)


def as_integer(q: Any) -> ct.IntType:
    return ct.IntType(_quantity(q).as_integer())


def is_integer(q: Any) -> ct.BoolType:
    return ct.BoolType(_quantity(q).is_integer())


def as_approximate_float(q: Any) -> ct.DoubleType:
    return ct.DoubleType(float(_quantity(q).value))


def sign(q: Any) -> ct.IntType:
    v = _quantity(q).value
    return ct.IntType((v > 0) - (v < 0))


def _operand(x: Any) -> Decimal:
    if isinstance(x, Quantity):
        return x.value
    if isinstance(x, int) and not isinstance(x, bool):
        return Decimal(x)
    raise TypeError(f"expected a Quantity or int, got {type(x).__name__}")


def add(q: Any, x: Any) -> Quantity:
    value = _quantity(q).value + _operand(x)
    return Quantity(value, str(value))


def sub(q: Any, x: Any) -> Quantity:
    value = _quantity(q).value - _operand(x)
    return Quantity(value, str(value))


def semver(text: Any, normalize: Any = False) -> Semver:
    return Semver.parse(text, bool(normalize)) if isinstance(text, str) else _not_string(text)


def is_semver(text: Any, normalize: Any = False) -> ct.BoolType:
    try:
        semver(text, normalize)
    except ValueError:
        return ct.BoolType(False)
    return ct.BoolType(True)


def _semver(v: Any) -> Semver:
    if not isinstance(v, Semver):
        raise TypeError(f"expected a Semver, got {type(v).__name__}")
    return v


def major(v: Any) -> ct.IntType:
    return ct.IntType(_semver(v).major)


def minor(v: Any) -> ct.IntType:
    return ct.IntType(_semver(v).minor)


def patch(v: Any) -> ct.IntType:
    return ct.IntType(_semver(v).patch)


def _not_string(x: Any) -> Any:
    raise TypeError(f"expected a string, got {type(x).__name__}")


_RE_OPTIONS = re2.Options()
_RE_OPTIONS.log_errors = False  # a bad user regex is reported by us, not logged to stderr
_RE_CACHE: dict[str, Any] = {}
_RE_LOCK = threading.Lock()


def compile_re2(pattern: str) -> Any:
    """RE2 (the engine CEL ``matches`` uses in Kubernetes), compiled once per pattern."""
    with _RE_LOCK:
        compiled = _RE_CACHE.get(pattern)
    if compiled is None:
        compiled = re2.compile(pattern, _RE_OPTIONS)  # raises re2.error on a bad pattern
        with _RE_LOCK:
            if len(_RE_CACHE) > 4096:
                _RE_CACHE.clear()
            _RE_CACHE[pattern] = compiled
    return compiled


def re2_message(error: Exception) -> str:
    """re2 errors carry bytes; make them one readable line."""
    arg = error.args[0] if error.args else error
    return arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)


def matches(text: Any, pattern: Any) -> ct.BoolType:
    """CEL ``string.matches(re)``: an RE2 search; a bad pattern is a ValueError (CEL error)."""
    if not isinstance(text, str) or not isinstance(pattern, str):
        raise TypeError("matches() takes two strings")
    try:
        compiled = compile_re2(pattern)
    except re2.error as e:
        raise ValueError(f"invalid regular expression {str(pattern)!r}: {re2_message(e)}") from None
    return ct.BoolType(compiled.search(text) is not None)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": quantity,
    "isQuantity": is_quantity,
    "compareTo": compare_to,
    "isGreaterThan": is_greater_than,
    "isLessThan": is_less_than,
    "asInteger": as_integer,
    "isInteger": is_integer,
    "asApproximateFloat": as_approximate_float,
    "sign": sign,
    "add": add,
    "sub": sub,
    "semver": semver,
    "isSemver": is_semver,
    "major": major,
    "minor": minor,
    "patch": patch,
    "matches": matches,
}
