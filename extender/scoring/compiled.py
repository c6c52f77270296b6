"""numba, the one way this project compiles a kernel.

Two computations run over every candidate node for every pod: FGD's trial placements
(``fragmentation``) and the blend of policy score and cost (``framework``). As NumPy
they were dozens of array passes and calls each, most of a request's time at 5,000
nodes and as much again for the 50 nodes a round of agent reports changes. Compiled,
each is one loop. Kernels keep IEEE arithmetic in source order (numba's default, no
fast-math), so they give the per-node reference's results bit for bit (tests compare).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

_warm_ups: list[Callable[[], object]] = []


def kernel(fn: Callable[..., Any]) -> Any:
    """Compiled without the GIL, cached on disk when a cache directory is writable
    (in-tree ``__pycache__``, else ``NUMBA_CACHE_DIR`` or ~/.cache); else compiled at
    start-up (~1 s instead of ~0.1 s). Inlined into the kernels that call it (numba IR
    inlining: ~25% faster for the small helpers of the FGD loop)."""
    try:
        return njit(fn, cache=True, nogil=True, inline="always")
    except RuntimeError:  # numba: "no locator available" (read-only install, no cache dir)
        return njit(fn, nogil=True, inline="always")


def warms(call: Callable[[], object]) -> Callable[[], object]:
    """Registers a call that compiles a kernel for the types requests use."""
    _warm_ups.append(call)
    return call


def warm_up() -> None:
    """Compile (or load from cache) every kernel before the first request would."""
    for call in _warm_ups:
        call()


@kernel
def stream(values: Any, step: int) -> int:
    """Reads one value in every ``step`` (one per cache line), in order; returns their sum,
    for the caller to return too, so that the compiler keeps the loads. A table about to
    be read in a new order (by ids) is usually out of cache when a request arrives:
    read so, every cache miss waits for the one before; read in order first, the
    prefetcher brings it in at memory speed."""
    seen = np.int64(0)
    for i in range(0, len(values), step):
        seen += np.int64(values[i])
    return int(seen)


@kernel
def equal(a: Any, b: Any) -> bool:
    """``np.array_equal`` of two 1-D arrays in one compiled call: NumPy's takes half a
    dozen calls, ~70 µs in a request that finds them cold."""
    if len(a) != len(b):
        return False
    for i in range(len(a)):  # noqa: SIM110 - a loop numba compiles; all(generator) is not
        if a[i] != b[i]:
            return False
    return True


@kernel
def equal_at(a: Any, b: Any, at: Any) -> bool:
    """``equal(a, b[at])`` without taking ``b[at]`` out first."""
    if len(a) != len(at):
        return False
    for i in range(len(a)):  # noqa: SIM110 - as in equal
        if a[i] != b[at[i]]:
            return False
    return True


@warms
def _warm_up() -> None:
    zero = np.zeros(1, dtype=np.int64)
    equal(zero, zero)
    equal_at(zero, zero, zero)
