"""Process settings for a server whose scheduling path must answer in milliseconds.

Measured at 5,000 nodes (bench/latency.py, docs/BENCHMARKS.md), three interpreter and C
library defaults each cost more than the evaluation itself:

- glibc malloc: scoring makes ~100 NumPy temporaries of 100-300 KiB per request; by
  default each is an mmap/munmap or a heap grow/trim, i.e. fresh pages and page faults
  every time (2.6x slower evaluation). Higher mmap and trim thresholds keep the pages;
  what is kept is bounded by the largest request's working set (a few MB).
- the cyclic garbage collector: a full collection walked the whole inventory (120 ms
  at 5,000 nodes, landing on some request). Objects alive at start-up are frozen out of
  it, and young collections run every 10,000 allocations instead of 700.
- the GIL switch interval: the ledger writer and watch threads held the interpreter for
  up to 5 ms at a time while a scheduler request waited; 1 ms bounds that wait.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import sys

log = logging.getLogger("headroom.runtime")

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's own dynamic ceiling on 64-bit
TRIM_THRESHOLD = 128 * 1024 * 1024
GC_YOUNG = 10_000
SWITCH_INTERVAL_S = 0.001


def tune_runtime() -> None:
    """Call once the server is built, before it serves (start-up objects are frozen)."""
    malloc = tune_malloc()
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, older, oldest)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    log.info("runtime tuned", extra={"malloc": malloc, "gc_frozen": gc.get_freeze_count(),
                                     "gc_young": GC_YOUNG, "switch_interval_s": SWITCH_INTERVAL_S})


def tune_malloc() -> bool:
    """True if glibc took the settings; a no-op elsewhere."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
