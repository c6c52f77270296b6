"""Process settings for a server whose scheduling path must answer in milliseconds.

Measured at 5,000 nodes (bench/latency.py, docs/BENCHMARKS.md), three interpreter and C
library defaults each cost more than the evaluation itself:

- glibc malloc: scoring makes ~100 NumPy temporaries of 100-300 KiB per request; by
  default each is an mmap/munmap or a heap grow/trim, i.e. fresh pages and page faults
  every time (2.6x slower evaluation). Higher mmap and trim thresholds keep the pages;
  what is kept is bounded by the largest request's working set (a few MB).
- the cyclic garbage collector: a full collection walked the whole inventory (120 ms
  at 5,000 nodes, landing on some request); objects alive at start-up are frozen out of
  it. A young collection lands on whichever request allocates the object that crosses
  the threshold, and costs ~0.6-1.2 us per object it finds alive (cold memory): it was
  11-20 ms at 10,000, inside a filter. What stays alive comes from agent reports and
  binds (a node's new state, the ledger writer's queue), so ``collect_due`` runs the
  collections there, every ``GC_YOUNG`` objects (~1-2 ms each), off the scheduling
  cycle; the automatic threshold is only a backstop for a process that gets neither.
- the GIL switch interval: the ledger writer and watch threads held the interpreter for
  up to 5 ms at a time while a scheduler request waited; 1 ms bounds that wait.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import sys
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("headroom.runtime")

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's own dynamic ceiling on 64-bit
TRIM_THRESHOLD = 128 * 1024 * 1024
GC_YOUNG = 2_000  # collect_due: young generation size that makes a collection due
GC_BACKSTOP = 50_000  # automatic young collections: only when collect_due is not called
SWITCH_INTERVAL_S = 0.001


def tune_runtime() -> None:
    """Call once the server is built, before it serves (start-up objects are frozen)."""
    malloc = tune_malloc()
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_BACKSTOP, older, oldest)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    log.info(
        "runtime tuned",
        extra={
            "malloc": malloc,
            "gc_frozen": gc.get_freeze_count(),
            "gc_young": GC_YOUNG,
            "gc_backstop": GC_BACKSTOP,
            "switch_interval_s": SWITCH_INTERVAL_S,
        },
    )


def collect_due(young: int = GC_YOUNG) -> int:
    """The collection CPython's own schedule would run next, once the young generation
    holds ``young`` objects: the oldest generation collected more than its threshold of
    times since it was last collected itself, else the young one. (CPython also puts a
    full collection off until a quarter of the old objects are new; that count is not
    visible from Python.) Returns the generation collected, -1 if none was due. Call it
    where the objects that stay alive are made, off the scheduling cycle."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    if counts[0] < young:
        return -1
    generation = next((g for g in (2, 1) if counts[g] > thresholds[g]), 0)
    gc.collect(generation)
    return generation


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


def run_event_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run the server's coroutine on uvloop where it is installed (a dependency except on
    Windows), else on asyncio's own loop. uvicorn picks uvloop by itself only inside
    ``uvicorn.run``; ``headroom serve`` starts its listeners from its own coroutine, and
    ``asyncio.run`` would give it the pure-Python loop, whose ``select`` and callbacks were
    the largest share of the extender's CPU under kube-scheduler (docs/BENCHMARKS.md,
    throughput)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)
