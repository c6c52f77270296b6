"""One bind per pod at a time: a retry waits for the first call's outcome.

kube-scheduler gives up on a bind after its extender ``httpTimeout`` and tries the pod
again, often while the first call is still writing the ledger. If the retry saw the
first call's reservation and answered "ok" while the first call then failed and undid
it, the pod would run with no ledger row and no reservation, and its memory would be
promised again (issue 23 F3). So the second call for a pod waits until the first has
finished and then looks at what it left; if the first is still running when the wait
runs out, the second answers an error and the scheduler retries once more.

Calls run on the server's worker threads, hence ``threading`` and a bounded wait.
"""

from __future__ import annotations

import threading
import time


class InFlight:
    """Pod UIDs whose bind is running in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, threading.Event] = {}

    def enter(self, uid: str, wait_s: float) -> bool:
        """Take the pod's turn, waiting up to ``wait_s`` for a call already running;
        False when that call is still running (the caller must not proceed)."""
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock:
                done = self._running.get(uid)
                if done is None:
                    self._running[uid] = threading.Event()
                    return True
            left = deadline - time.monotonic()
            if left <= 0 or not done.wait(left):
                return False

    def leave(self, uid: str) -> None:
        """End the pod's turn; a waiting call goes next."""
        with self._lock:
            done = self._running.pop(uid, None)
        if done is not None:
            done.set()
