"""Semantic versions for DRA ``version`` attributes (the Kubernetes CEL semver library).

The NVIDIA driver publishes ``cudaComputeCapability``, ``driverVersion`` and
``cudaDriverVersion`` as ``version`` attributes. Kubernetes exposes them to CEL as a
``Semver`` with ``compareTo``/``isGreaterThan``/``isLessThan``/``major``/``minor``/
``patch`` and the constructor ``semver('8.0.0')``. Comparing them as strings would
order ``'10.0.0' < '9.0.0'``, so they get a real type here, ordered by semver 2.0.0
precedence (build metadata ignored).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUM = r"0|[1-9][0-9]*"
_PRE_ID = r"(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER = re.compile(
    rf"^(?P<major>{_NUM})\.(?P<minor>{_NUM})\.(?P<patch>{_NUM})"
    rf"(?:-(?P<pre>{_PRE_ID}(?:\.{_PRE_ID})*))?"
    r"(?:\+(?P<build>[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_LOOSE = re.compile(r"^v?(?P<core>[0-9]+(?:\.[0-9]+){0,2})(?P<rest>[-+].*)?$")


@dataclass(frozen=True, order=False)
class Semver:
    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()
    text: str = ""

    @classmethod
    def parse(cls, text: str, normalize: bool = False) -> Semver:
        """Strict semver; ``normalize`` accepts ``v1.2``/``1.2``/``01.2.3`` like Kubernetes."""
        if not isinstance(text, str):
            raise ValueError(f"semver must be a string, not {type(text).__name__}")
        source = _normalized(text) if normalize else text
        m = _SEMVER.match(source)
        if m is None:
            raise ValueError(f"not a semantic version: {text!r} (e.g. 8.0.0, 550.54.15)")
        pre = tuple(m["pre"].split(".")) if m["pre"] else ()
        return cls(int(m["major"]), int(m["minor"]), int(m["patch"]), pre, text)

    def compare(self, other: Semver) -> int:
        mine, theirs = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if mine != theirs:
            return -1 if mine < theirs else 1
        return _compare_pre(self.pre, other.pre)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))


def _normalized(text: str) -> str:
    m = _LOOSE.match(text)
    if m is None:
        return text
    parts = [str(int(p)) for p in m["core"].split(".")]
    parts += ["0"] * (3 - len(parts))
    return ".".join(parts) + (m["rest"] or "")


def _compare_pre(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """Semver 2.0.0 rule 11: a release outranks its pre-releases; ids compare left to right."""
    if a == b:
        return 0
    if not a or not b:
        return 1 if not a else -1
    for x, y in zip(a, b, strict=False):
        if x == y:
            continue
        if x.isdigit() and y.isdigit():
            return -1 if int(x) < int(y) else 1
        if x.isdigit() != y.isdigit():
            return -1 if x.isdigit() else 1  # numeric ids sort before alphanumeric ones
        return -1 if x < y else 1
    return -1 if len(a) < len(b) else 1
