"""Kubernetes ``resource.Quantity`` for CEL: strict parsing and the Quantity value type.

cel-python has no Kubernetes quantity library, so ``quantity('20Gi')`` and the
Quantity methods (``compareTo``, ``isGreaterThan``, ...) are implemented here and
registered with celpy as extension functions by ``extender.dra.cel``. Values are exact
``Decimal``s, as the apiserver's ``inf.Dec`` comparison is exact.

Parsing is strict (the apiserver's grammar), unlike ``extender.quantity`` which is
lenient about whitespace: a string the apiserver would reject must not be accepted
here either, or a template we write could fail at ``kubectl apply``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

# <signedNumber><suffix>; suffix = binarySI | decimalSI | decimalExponent.
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<dec>[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_EXP = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
MIB = 2**20


def parse_k8s_quantity(text: str) -> Decimal:
    """The exact value of a Kubernetes quantity string; ValueError names what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"quantity must be a string, not {type(text).__name__}")
    m = _QUANTITY.match(text)
    if m is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r} (e.g. 20Gi, 81559Mi, 500m, 1e3)")
    value = Decimal(m["num"])
    if m["bin"]:
        return value * _BINARY[m["bin"]]
    if m["dec"]:
        return value.scaleb(_DECIMAL_EXP[m["dec"]])
    if m["exp"]:
        return value.scaleb(int(m["exp"]))
    return value


@dataclass(frozen=True)
class Quantity:
    """A CEL ``Quantity`` value: compared exactly, printed as it was written."""

    value: Decimal
    text: str

    @classmethod
    def parse(cls, text: str) -> Quantity:
        return cls(parse_k8s_quantity(text), text)

    def __eq__(self, other: object) -> bool:
        # quantity('1Gi') == quantity('1024Mi') is true in Kubernetes CEL (semantic equality).
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def compare(self, other: Quantity) -> int:
        return (self.value > other.value) - (self.value < other.value)

    def is_integer(self) -> bool:
        return self.value == self.value.to_integral_value() and (
            _INT64_MIN <= self.value <= _INT64_MAX
        )

    def as_integer(self) -> int:
        """The int64 value; ValueError when it has a fraction or overflows (as in Kubernetes)."""
        if not self.is_integer():
            raise ValueError(f"quantity {self.text} is not an int64 integer")
        return int(self.value)


def quantity_mib_floor(text: str) -> int:
    """A byte capacity as whole MiB, rounded down (never claim memory that is not there)."""
    return int(parse_k8s_quantity(text) // MIB)


def quantity_mib_ceil(text: str) -> int:
    """A granted byte amount as whole MiB, rounded up (a grant is never shrunk)."""
    return int(-(-parse_k8s_quantity(text) // MIB))
