"""Types of the compiled ``golist`` module (``golist.c``): candidate lists as Go writes
them, read in one pass. Arrays are NumPy arrays, C-contiguous."""

import numpy as np

def keyed(data: bytes, keys: np.ndarray, hashes: np.ndarray, shares: np.ndarray, /) -> int: ...
def fingerprint(data: bytes, keys: np.ndarray, /) -> tuple[int, int, int] | None: ...
def learned(
    data: bytes,
    mult: np.ndarray,
    table: np.ndarray,
    spot: np.ndarray,
    heap: np.ndarray,
    end: int,
    ids: np.ndarray,
    /,
) -> int: ...
def learned_hash(name: bytes, mult: np.ndarray, /) -> int: ...
