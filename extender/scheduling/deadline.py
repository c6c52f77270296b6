"""Ledger calls of the bind path, answered in time even when the database is frozen.

The database's own timeouts (statement, lock) need a server that runs; TCP keepalive
needs a peer whose kernel is gone. A frozen server (SIGSTOP, a stalled VM, a storage
hang) has neither, and a bind waiting on it would outlive kube-scheduler's 5 s extender
timeout. So the bind path makes each ledger call in a thread of its own and waits at
most ``seconds``: past that it answers ``LedgerUnavailable(maybe_written=True)`` (the
call may still complete later), which the service treats as "ask the ledger before the
pod's next bind". The thread itself stays with the call until the database answers.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from extender.core.allocation import LedgerUnavailable

T = TypeVar("T")


class LedgerTimeout(LedgerUnavailable):
    """The call did not answer in time; ``pending`` is the call, still running."""

    def __init__(self, message: str, pending: Future[Any]) -> None:
        super().__init__(message, maybe_written=True)
        self.pending = pending


class Deadline:
    def __init__(self, seconds: float, workers: int = 8) -> None:
        self.seconds = seconds
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ledger")

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, or ``LedgerUnavailable`` once ``seconds`` have passed."""
        future = self._pool.submit(fn, *args)
        try:
            return future.result(timeout=self.seconds)
        except FutureTimeout:
            message = f"the ledger did not answer within {self.seconds:g} s"
            raise LedgerTimeout(message, future) from None
