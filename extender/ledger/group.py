"""Group commit: the bind path's ledger writes share transactions, each still durable
before its caller returns.

kube-scheduler binds many pods at once (its binding cycles run concurrently), and every
bind writes its decision and then its outcome. One transaction each made every write
pay for the ledger's write lock, the chain head's update and a disk sync (SQLite) or a
commit round trip (PostgreSQL), and made concurrent binds queue on the lock one by one.

Here the writers queue instead, and the one at the front (the *leader*, a caller's own
thread: no extra thread hop) runs everything queued behind it, up to ``max_batch``, in
one transaction, each write in a savepoint of its own. Then it wakes the writers it
carried, and the next writer in line leads the next batch. So:

- a write returns only after the transaction that holds it has committed, as before;
- one write's refusal (``AlreadyAllocated``, ``CapacityExceeded``, a unique index) rolls
  back its savepoint only; the others in the batch go on;
- a database failure (``LedgerUnavailable``: the connection, a lock timeout, the commit)
  fails every write of the batch with that error, as each would have failed alone;
- a batch of one runs without a savepoint, exactly as a write alone did;
- writes in one batch are applied in the order they queued, so a later write sees an
  earlier one (a GPU's capacity check counts the decisions before it).

A write whose caller need not wait (``later``: a bind's ``bound`` status, after its
decision is already durable) *rides*: it goes first in the next batch that any writer
leads, and costs no transaction and no thread hop of its own. Riders left with no
writer to carry them are committed by one flusher thread, ``grace`` seconds after it is
woken (one transaction for whatever gathered meanwhile): the last bind of a burst, or a
quiet ledger, gets its status durable that much later. A rider's failure is logged
(``ledger.rider_lost``, with the write and its pod): there is nobody waiting to raise it to.

The same design as LevelDB's writer queue and PostgreSQL's own group commit.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from extender.core.allocation import LedgerUnavailable
from extender.ledger.trail import Tx

T = TypeVar("T")
log = logging.getLogger("headroom.ledger")

MAX_BATCH = 64
# how long riders wait for a writer to carry them before the flusher commits them: at a
# busy scheduler's rate (100 binds/s) the next decision comes well within it
RIDE_GRACE_S = 0.05


@dataclass(eq=False)
class _Write(Generic[T]):
    """One queued write: what to run (None: a flusher leading riders alone), and once
    it ran, its result or error."""

    op: str
    run: Callable[[Tx], T] | None
    pod_uid: str = ""  # a rider's: named in the log line if its transaction fails
    wake: threading.Event = field(default_factory=threading.Event)
    done: bool = False
    result: Any = None
    error: BaseException | None = None

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        result: T = self.result
        return result


class GroupCommit:
    """Runs writes (functions of a ``Tx``) in shared transactions: ``transact(ops)``
    opens one for the writes named ``ops`` (for their metrics)."""

    def __init__(
        self,
        transact: Callable[[list[str]], AbstractContextManager[Tx]],
        max_batch: int = MAX_BATCH,
        grace: float = RIDE_GRACE_S,
    ) -> None:
        self._transact = transact
        self._max_batch = max_batch
        self._grace = grace
        self._lock = threading.Lock()
        self._queue: deque[_Write[Any]] = deque()  # the front one leads (is running)
        self._riders: list[_Write[Any]] = []  # ``later`` writes, for the next batch
        self._appended = self._taken = 0  # riders so far, and those a batch took (FIFO)
        self._wake = threading.Event()  # riders wait with no writer to carry them
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._closed = False

    def run(self, op: str, write: Callable[[Tx], T]) -> T:
        """``write(tx)`` once its transaction has committed (or its error)."""
        mine: _Write[T] = _Write(op, write)
        self._queued(mine)
        return mine.outcome()

    def _queued(self, mine: _Write[Any]) -> None:
        """Queue ``mine`` and return once it ran: carried by a leader, or leading."""
        with self._lock:
            self._queue.append(mine)
            leads = len(self._queue) == 1
        if not leads:
            mine.wake.wait()  # set when carried by a leader, or when it is our turn
            if mine.done:
                return
        with self._lock:
            batch = list(itertools.islice(self._queue, self._max_batch))
            riders = self._riders[: self._max_batch]
            del self._riders[: len(riders)]
            self._taken += len(riders)
        try:
            self._commit([*riders, *(w for w in batch if w.run is not None)])
        finally:
            with self._lock:
                for _ in batch:
                    self._queue.popleft()
                following = self._queue[0] if self._queue else None
                stranded = following is None and bool(self._riders)
            for w in batch:
                w.done = True
                w.wake.set()
            if following is not None:
                following.wake.set()  # not done: it leads the next batch (and the riders)
            elif stranded:
                self._wake.set()
            _report_lost(riders)

    def later(self, op: str, write: Callable[[Tx], Any], pod_uid: str) -> None:
        """``write(tx)`` in the next transaction; returns at once, before it is durable
        (if that transaction fails, the error is logged)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the ledger is closed")
            self._riders.append(_Write(op, write, pod_uid))
            self._appended += 1
            idle = not self._queue  # else the running leader, or the next, carries it
            if self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._flush_loop, name="ledger-flusher", daemon=True
                )
                self._flusher.start()
        if idle:
            self._wake.set()

    def flush(self) -> None:
        """Return once the riders queued so far are committed (or failed, and logged):
        shutdown, tests. Queued behind the batch that runs now, which may carry some of
        them, then leading the rest."""
        while True:
            self._queued(_Write("riders", None))
            with self._lock:
                if not self._riders:
                    return

    def close(self) -> None:
        """Refuse new riders, commit the waiting ones, and stop the flusher."""
        with self._lock:
            self._closed = True
            flusher = self._flusher
        self._stop.set()
        self._wake.set()
        if flusher is not None:
            flusher.join(timeout=10)
        self.flush()

    def _flush_loop(self) -> None:
        """The flusher: leads a batch of riders alone once one has waited ``grace``
        with no writer to carry it; riders that came later get their own grace."""
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                waiting = self._appended  # the riders whose grace starts now
            self._stop.wait(self._grace)  # a writer may come and carry them meanwhile
            with self._lock:
                if self._closed:
                    return
                stranded = self._taken < waiting and not self._queue
                later = bool(self._riders)
            if stranded:
                self._queued(_Write("riders", None))
            elif later:
                self._wake.set()

    def _commit(self, batch: list[_Write[Any]]) -> None:
        """One transaction for the batch; each write's result or error on it."""
        if not batch:
            return
        try:
            with self._transact([w.op for w in batch]) as tx:
                if len(batch) == 1:
                    _execute(tx, batch[0])
                else:
                    for w in batch:
                        _apply(tx, w)
        except BaseException as e:  # nothing of the transaction was committed
            for w in batch:
                if w.error is None:  # a write refused on its own keeps its refusal
                    w.error, w.result = e, None


def _apply(tx: Tx, w: _Write[Any]) -> None:
    """One write of a batch in its own savepoint: its refusal undoes only its rows; a
    database failure (``LedgerUnavailable``) is the whole batch's."""
    try:
        with tx.savepoint():
            _execute(tx, w)
    except LedgerUnavailable:
        raise
    except Exception as e:
        w.error = e


def _execute(tx: Tx, w: _Write[Any]) -> None:
    if w.run is not None:
        w.result = w.run(tx)


def _report_lost(riders: list[_Write[Any]]) -> None:
    for w in riders:
        if w.error is not None:
            log.warning(
                "a write its caller did not wait for failed",
                extra={
                    "event": "ledger.rider_lost",
                    "op": w.op,
                    "pod_uid": w.pod_uid,
                    "error": str(w.error),
                },
            )
