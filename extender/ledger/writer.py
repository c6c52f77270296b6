"""Report-driven ledger writes (usage samples, discrepancies, node prices) off the
request path: a bounded queue drained by one thread in batches.

Agent reports arrive from every node every few seconds; writing each to the database
inline would put disk syncs on the report path and make a database outage fail the
reports that keep headroom fresh. Losing a usage sample under overload is acceptable
(the rollup is a time-weighted mean); losing a grant is not, and grants never go here.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from extender.ledger.base import Ledger

log = logging.getLogger("headroom.ledger_writer")

Write = Callable[[Ledger], None]


class LedgerWriter:
    def __init__(self, ledger: Ledger, max_pending: int = 10_000, batch: int = 256) -> None:
        self.ledger = ledger
        self._queue: queue.Queue[Write | None] = queue.Queue(maxsize=max_pending)
        self._batch = batch
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self._thread.start()

    def submit(self, write: Write) -> None:
        try:
            self._queue.put_nowait(write)
        except queue.Full:
            self.dropped += 1

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until everything submitted so far is written (tests, shutdown)."""
        done = threading.Event()
        self.submit(lambda _: done.set())
        done.wait(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._apply(item)
            for _ in range(self._batch):
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    return
                self._apply(nxt)

    def _apply(self, write: Write) -> None:
        try:
            write(self.ledger)
        except Exception as e:
            log.warning("ledger write from report failed", extra={"error": str(e)[:300]})

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)
