"""Parse simulated GPU specs such as ``4xA10G:24Gi`` or ``8xH100:80Gi,2xL4:24Gi``.

Memory units follow Kubernetes quantities, because the same people write
``headroom.dev/gpu-memory: "20Gi"``: ``Mi``/``Gi``/``Ti`` are powers of 1024, ``M``/``G``/
``T`` powers of 1000 (so ``80G`` is 76293 MiB, not 81920). A bare number is refused
rather than guessed. A model name starts with a letter (``4x:24Gi`` is an error, not a
GPU called "4x").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from extender.wire.report import MAX_GPUS

_ONE_SPEC = re.compile(
    r"^\s*(?:(?P<count>\d+)\s*[xX]\s*)?(?P<model>[A-Za-z][^:,]*?)\s*:\s*"
    r"(?P<amount>\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z]*)\s*$"
)
_UNIT_BYTES = {
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
}
_EXAMPLE = "expected COUNTxMODEL:MEMORY, e.g. 4xA10G:24Gi or 8xH100:80Gi,2xL4:24Gi"


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One simulated GPU: its model name and total memory."""

    model: str
    memory_mib: int


def parse_gpu_spec(text: str) -> list[GpuSpec]:
    """Expand a comma-separated spec into one ``GpuSpec`` per GPU, in order.

    Raises ``ValueError`` with the offending part and an example on any bad input.
    """
    if not text or not text.strip():
        raise ValueError(f"empty GPU spec; {_EXAMPLE}")
    gpus: list[GpuSpec] = []
    for part in text.split(","):
        count, spec = _parse_one(part)
        gpus.extend([spec] * count)
    if len(gpus) > MAX_GPUS:
        raise ValueError(f"GPU spec {text!r} describes {len(gpus)} GPUs; at most {MAX_GPUS}")
    return gpus


def _parse_one(part: str) -> tuple[int, GpuSpec]:
    m = _ONE_SPEC.match(part)
    if m is None:
        raise ValueError(f"bad GPU spec {part.strip()!r}; {_EXAMPLE}")
    count = int(m["count"]) if m["count"] else 1
    if count < 1:
        raise ValueError(f"bad GPU count in {part.strip()!r}: must be at least 1")
    unit = m["unit"]
    if unit not in _UNIT_BYTES:
        shown = f"unit {unit!r}" if unit else "no unit"
        raise ValueError(
            f"bad memory in {part.strip()!r}: {shown}; use one of {', '.join(_UNIT_BYTES)}"
        )
    memory_mib = int(float(m["amount"]) * _UNIT_BYTES[unit]) // 1024**2
    if memory_mib < 1:
        raise ValueError(f"bad memory in {part.strip()!r}: must be at least 1Mi")
    return count, GpuSpec(model=m["model"].strip(), memory_mib=memory_mib)
