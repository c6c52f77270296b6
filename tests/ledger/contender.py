"""Subprocess for the concurrency test: race to decide every pod of a shared set.

``python -m tests.ledger.contender TARGET PODS SEED`` prints ``won UID`` per decision
it recorded and ``lost UID`` per ``AlreadyAllocated``.
"""

from __future__ import annotations

import random
import sys

from extender.core.allocation import AlreadyAllocated
from extender.ledger import open_ledger
from extender.ledger.base import Ledger
from extender.ledger.dialect import NullHooks
from extender.wire.clock import SystemClock

from .helpers import GIB, decision, grant


def race(ledger: Ledger, pods: int, seed: int, out: list[str]) -> None:
    order = list(range(pods))
    random.Random(seed).shuffle(order)
    for i in order:
        uid = f"c-{i}"
        try:
            ledger.record_decision(
                decision(  # GPUs of its own: the race is for the pod, not for memory
                    uid,
                    grant(f"GPU-{i}-0", 10 * GIB),
                    grant(f"GPU-{i}-1", 10 * GIB, index=1),
                    at=1.0 + i,
                )
            )
            out.append(f"won {uid}")
        except AlreadyAllocated:
            out.append(f"lost {uid}")


if __name__ == "__main__":
    led = open_ledger(sys.argv[1], SystemClock(), hooks=NullHooks())
    lines: list[str] = []
    race(led, int(sys.argv[2]), int(sys.argv[3]), lines)
    led.close()
    print("\n".join(lines), flush=True)
