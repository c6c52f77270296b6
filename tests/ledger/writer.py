"""Subprocess writer for the durability tests: a burst of decide+bind, one line per commit.

``python -m tests.ledger.writer TARGET PREFIX COUNT [--retry]``. A ``committed UID``
line is printed (and flushed) only after record_decision and mark_bound returned,
so every printed pod must survive a crash. With ``--retry`` an unavailable ledger is
retried; ``AlreadyAllocated`` on a retry means the lost-ack attempt did commit.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TypeVar

from extender.core.allocation import AlreadyAllocated, Decision, LedgerUnavailable
from extender.ledger import open_ledger
from extender.ledger.dialect import NullHooks
from extender.wire.clock import SystemClock

from .helpers import GIB, decision, grant

GRANTS = 3

T = TypeVar("T")


def _retrying(fn: Callable[..., T], retry: bool) -> T:
    deadline = time.monotonic() + 120
    while True:
        try:
            return fn()
        except LedgerUnavailable as exc:
            if not retry or time.monotonic() > deadline:
                raise
            print(f"retry: {exc}", file=sys.stderr, flush=True)
            time.sleep(0.05)


def main(target: str, prefix: str, count: int, retry: bool) -> None:
    ledger = _retrying(lambda: open_ledger(target, SystemClock(), hooks=NullHooks()), retry)
    t = time.time()
    for i in range(count):
        uid = f"{prefix}-{i}"
        gpus = (grant(f"GPU-{i}-{g}", 10 * GIB, index=g) for g in range(GRANTS))  # room: each
        d = decision(uid, *gpus, at=t + i)  # pod its own GPUs (the ledger checks capacity)
        attempts = 0

        def decide(d: Decision = d) -> None:
            nonlocal attempts
            attempts += 1
            try:
                ledger.record_decision(d)
            except AlreadyAllocated:
                if attempts == 1:
                    raise  # a fresh pod can only hit this through a lost-ack retry

        _retrying(decide, retry)
        _retrying(lambda uid=uid, i=i: ledger.mark_bound(uid, t + i + 0.5), retry)
        print(f"committed {uid}", flush=True)
    ledger.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), "--retry" in sys.argv[4:])
