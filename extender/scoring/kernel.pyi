"""Types of the compiled ``kernel`` module (``kernel.c``): the FGD policies' pass over many
nodes. Arrays are NumPy arrays, C-contiguous, of the dtypes ``fragmentation.py`` builds;
the tuples are ``Batch``, ``Mix`` and ``PerPod`` of ``args.h``."""

from typing import Any

import numpy as np

Batch = tuple[np.ndarray, ...]  # GpuBatch.kernel_args()
MixArgs = tuple[Any, ...]  # (shapes, weight columns, counts, mems, cpus, host MiB, weights)
PerPodArgs = tuple[Any, ...]  # (asks, shares, counts, MiB, cpu, host MiB)

def scores(
    slots: int,
    nodes: int,
    batch: Batch,
    rows: np.ndarray,
    states: np.ndarray | None,
    demand: tuple[int, int, int, int, int],
    limits: tuple[int, int],
    mix: MixArgs,
    per_pod: PerPodArgs,
    options: tuple[bool, float, float, np.ndarray | None],
    out: tuple[np.ndarray, np.ndarray, np.ndarray],
    /,
) -> None: ...
def value(
    slots: int,
    nodes: int,
    batch: Batch,
    rows: np.ndarray,
    pod: tuple[int, int],
    limits: tuple[int, int],
    mix: MixArgs,
    out: np.ndarray,
    /,
) -> None: ...
def stranding(
    slots: int,
    nodes: int,
    batch: Batch,
    rows: np.ndarray,
    pod: tuple[int, int],
    per_pod: PerPodArgs,
    added: np.ndarray,
    out: np.ndarray,
    /,
) -> None: ...
def blend(
    raw: np.ndarray,
    fits: np.ndarray,
    prices: np.ndarray,
    w_policy: float,
    w_cost: float,
    out: np.ndarray,
    /,
) -> int: ...
def share(on: bool, /) -> bool: ...
def helped() -> int: ...
def helping() -> bool: ...
def lanes(on: bool, /) -> bool: ...
def fresh(
    received: np.ndarray,
    prices: np.ndarray,
    rows: np.ndarray,
    now: float,
    stale_after: float,
    out: tuple[np.ndarray, np.ndarray, np.ndarray],
    /,
) -> None: ...
