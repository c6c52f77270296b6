"""Kubernetes ``resource.Quantity`` for CEL: strict parsing and the Quantity value type.

cel-python has no Kubernetes quantity library, so ``quantity('20Gi')`` and the
Quantity methods (``compareTo``, ``isGreaterThan``, ...) are implemented here and
registered with celpy as extension functions by ``extender.dra.cel``. Values are exact
``Decimal``s, as the apiserver's ``inf.Dec`` comparison is exact.

Parsing is ``extender.core.quantity``'s, the apiserver's own grammar: a string the apiserver
would reject must not be accepted here either, or a template we write could fail at
``kubectl apply``.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from extender.core.quantity import MIB, parse_quantity

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class Quantity:
    """A CEL ``Quantity`` value: compared exactly, printed as it was written."""

    value: Decimal
    text: str

    @classmethod
    def parse(cls, text: str) -> Quantity:
        return cls(parse_quantity(text), text)

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
    return int(parse_quantity(text) // MIB)


def quantity_mib_ceil(text: str) -> int:
    """A granted byte amount as whole MiB, rounded up (a grant is never shrunk)."""
    return mib_ceil(parse_quantity(text))


def mib_ceil(amount: Decimal) -> int:
    """Bytes as whole MiB, rounded up. Not ``-(-x // MIB)``: Decimal's ``//`` truncates
    toward zero, so that would round down."""
    return int((amount / MIB).to_integral_value(rounding=ROUND_CEILING))
