"""Kubernetes resource quantities ("20Gi", "1500Mi", "16G", "1") to plain numbers."""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal, InvalidOperation
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_MILLI = {"m": Decimal("0.001")}

MIB = 2**20


def parse_quantity(text: str) -> Decimal:
    """A quantity string to its value in base units; ValueError names what is wrong."""
    s = text.strip()
    if not s:
        raise ValueError("empty quantity")
    for table in (_BINARY, _DECIMAL, _MILLI):
        for suffix, factor in table.items():
            if s.endswith(suffix):
                return _number(s[: -len(suffix)], text) * factor
    return _number(s, text)


def _number(s: str, original: str) -> Decimal:
    try:
        value = Decimal(s)
    except InvalidOperation:
        raise ValueError(f"not a quantity: {original!r}") from None
    if not value.is_finite() or value < 0:
        raise ValueError(f"not a non-negative quantity: {original!r}")
    return value


# Every filter reads its pod's quantities, and pods of one workload repeat the same few
# strings ("1", "24Gi"): parsed once (Decimal arithmetic was ~1/10 of a filter's own
# work at 5,000 nodes). Errors are raised, never cached.
@lru_cache(maxsize=4096)
def quantity_to_mib(text: str) -> int:
    """Bytes quantity to whole MiB, rounded up (a request is never shrunk)."""
    whole = _whole_bytes(text)
    if whole is not None:  # "20Gi", "1500Mi": integer arithmetic, exact, no Decimal
        return -(-whole // MIB)
    value = parse_quantity(text)
    return int((value / MIB).to_integral_value(rounding=ROUND_CEILING))


def _whole_bytes(text: str) -> int | None:
    """Bytes of a quantity written as ASCII digits and a binary or decimal suffix (what
    pods write), else None (``parse_quantity`` reads the rest). A new ask misses the
    cache, and Decimal took ~15 µs of such a filter."""
    s = text.strip()
    for table, width in ((_BINARY, 2), (_DECIMAL, 1)):
        factor, digits = table.get(s[-width:]), s[:-width]
        if factor and digits.isascii() and digits.isdigit():
            return int(digits) * factor
    return None


@lru_cache(maxsize=4096)
def quantity_to_int(text: str) -> int:
    value = parse_quantity(text)
    if value != value.to_integral_value():
        raise ValueError(f"not a whole number: {text!r}")
    return int(value)
