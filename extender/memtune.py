"""glibc malloc kept from returning memory between requests.

Scoring 5,000 nodes makes ~100 NumPy temporaries of 100-300 KiB per request. With
glibc's defaults each is an mmap/munmap pair or a heap grow/trim, i.e. fresh pages and
page faults every time: measured, that alone made the vectorised evaluation 2.6x slower
(bench/latency.py, docs/BENCHMARKS.md). Raising the mmap and trim thresholds keeps
those pages in the process. The memory kept is bounded by the largest request's working
set (a few MB). A no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("headroom.memtune")

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's own dynamic ceiling on 64-bit
TRIM_THRESHOLD = 128 * 1024 * 1024


def tune_malloc() -> bool:
    """True if glibc took the settings."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    log.debug("malloc thresholds", extra={"applied": ok})
    return ok
