"""Kubernetes resource quantities ("20Gi", "1500Mi", "16G", "500m", "1e3"), read exactly as
Kubernetes reads them, and never expensively.

The grammar is ``resource.ParseQuantity``'s (k8s.io/apimachinery), ported character for
character: ASCII digits only, one optional sign, an optional fraction, then a binary
suffix (``Ki``..``Ei``), a decimal one (``n u m k M G T P E``) or an exponent
(``e3``, ``E-2``). Kubernetes' oddities are kept (``"."``, ``"-"`` and ``"5."`` are 0 or
5; non-zero values below one nano-unit round up to it) because a pod's annotation must
mean here what it means to the API server. tests/test_quantity.py holds this module to a
table of Kubernetes' own verdicts (tests/tools/quantity_oracle).

Where this deliberately differs, it refuses instead of computing: a string longer than
``MAX_LENGTH``, or a value of 2^63-1 or more (Kubernetes silently caps SI quantities
there; ``1e999999`` it keeps whole). Those checks run on the string's length and digit
count before any arithmetic, so no request can make the event loop turn a
million-digit number into an integer. Every error is a ``ValueError`` whose message
quotes at most the first characters of the input.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_UP, Context, Decimal
from functools import lru_cache

MAX_LENGTH = 64  # "123456789012345678.123456789Gi" is 30; nothing real comes near 64
MAX_VALUE = 2**63 - 1
MIB = 2**20

_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_INT32 = 2**31
_NANO = Decimal("1e-9")
# Digits and exponents are bounded before arithmetic, so this precision is exact.
_EXACT = Context(prec=4 * MAX_LENGTH, Emax=10 * MAX_LENGTH, Emin=-10 * MAX_LENGTH)


class QuantityError(ValueError):
    """Not a Kubernetes quantity, or not one headroom will compute with."""


def shown(text: str, limit: int = 24) -> str:
    """The input as an error message quotes it: short, whatever was sent."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def parse_quantity(text: str) -> Decimal:
    """The exact value of a quantity string, as Kubernetes parses it (see module doc)."""
    if not isinstance(text, str):
        raise QuantityError(f"a quantity must be a string, not {type(text).__name__}")
    if not text:
        raise QuantityError("not a Kubernetes quantity: empty string")
    if len(text) > MAX_LENGTH:
        raise QuantityError(f"quantity {shown(text)} is longer than {MAX_LENGTH} characters")
    negative, num, denom, suffix = _split(text)
    base, exponent = _suffix(suffix, text)
    if _digitless(text, suffix) and (exponent < -9 if base == 10 else exponent >= 50):
        # Kubernetes reads "Gi" or "e-9" as 0 on its int64 path, but "Pi" and "e-10" take
        # its big-decimal path, which needs a digit: a quirk kept so both agree.
        raise QuantityError(f"not a Kubernetes quantity: {shown(text)} (no digits)")
    digits = num + denom
    if digits.strip("0") == "":
        return Decimal(0)
    # order of magnitude of num.denom: len(num) digits before the point, or the zeros after
    order = len(num) if num != "0" else -(len(denom) - len(denom.lstrip("0")))
    if base == 10 and order + exponent > 19:
        raise QuantityError(f"quantity {shown(text)} is too large (2^63-1 at most)")
    if base == 10 and order + exponent < -12:
        return _nano(negative)  # below one nano-unit: Kubernetes rounds it up to 1n
    value = Decimal(f"{num}.{denom or '0'}")
    value = _EXACT.scaleb(value, exponent) if base == 10 else _EXACT.multiply(value, 2**exponent)
    if value >= MAX_VALUE:
        raise QuantityError(f"quantity {shown(text)} is too large (2^63-1 at most)")
    if value.as_tuple().exponent < -9:  # type: ignore[operator]
        value = value.quantize(_NANO, rounding=ROUND_UP)
    return -value if negative else value


def _digitless(text: str, suffix: str) -> bool:
    number = text[: len(text) - len(suffix)]
    return not any(c in _DIGITS for c in number)


def _nano(negative: bool) -> Decimal:
    return -_NANO if negative else _NANO


def _split(text: str) -> tuple[bool, str, str, str]:
    """(negative, integer digits without leading zeros or "0", fraction digits, suffix):
    ``parseQuantityString``'s walk, including what it accepts that looks odd."""
    end = len(text)
    pos = 0
    negative = False
    if text[0] in "+-":
        negative = text[0] == "-"
        pos = 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return negative, "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(
            f"not a Kubernetes quantity: {shown(text)} (e.g. 20Gi, 81559Mi, 500m, 1e3)"
        )
    return negative, num, denom, text[suffix_start:]


def _suffix(suffix: str, text: str) -> tuple[int, int]:
    """(base, exponent) of a suffix: the decimal table, the binary one, or ``e<int>``."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix]
    if suffix in _BINARY:
        return 2, _BINARY[suffix]
    rest = suffix[1:]
    body = rest[1:] if rest[:1] in ("+", "-") else rest
    if suffix[:1] in ("e", "E") and body and set(body) <= _DIGITS:
        exponent = int(rest)  # at most MAX_LENGTH digits: cheap
        if -_INT32 <= exponent < _INT32:
            return 10, exponent
        raise QuantityError(f"quantity {shown(text)} is too large (exponent out of range)")
    raise QuantityError(
        f"not a Kubernetes quantity: {shown(text)} (unknown suffix {shown(suffix, 8)}; "
        "Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or e<exponent>)"
    )


# Every filter reads its pod's quantities, and pods of one workload repeat the same few
# strings ("1", "24Gi"): parsed once. Errors are raised, never cached.
@lru_cache(maxsize=4096)
def quantity_to_mib(text: str) -> int:
    """Bytes quantity to whole MiB, rounded up (a request is never shrunk)."""
    value = parse_quantity(text)
    return int((value / MIB).to_integral_value(rounding=ROUND_CEILING))


@lru_cache(maxsize=4096)
def quantity_to_int(text: str) -> int:
    """A count ("1", "2", "1e1"); fractions are refused, as for extended resources."""
    value = parse_quantity(text)
    if value != value.to_integral_value():
        raise QuantityError(f"not a whole number: {shown(text)}")
    return int(value)


@lru_cache(maxsize=4096)
def quantity_to_milli(text: str) -> int:
    """A CPU quantity ("500m", "2", "1.5") in millicores, rounded up as Kubernetes'
    ``MilliValue`` rounds a request."""
    value = parse_quantity(text)
    return int((value * 1000).to_integral_value(rounding=ROUND_CEILING))


@lru_cache(maxsize=4096)
def quantity_to_mib_down(text: str) -> int:
    """Bytes quantity to whole MiB, rounded down: a capacity is never overstated."""
    value = parse_quantity(text)
    return int((value / MIB).to_integral_value(rounding=ROUND_FLOOR))


@lru_cache(maxsize=4096)
def quantity_to_milli_down(text: str) -> int:
    """A CPU capacity in millicores, rounded down: a capacity is never overstated."""
    value = parse_quantity(text)
    return int((value * 1000).to_integral_value(rounding=ROUND_FLOOR))
