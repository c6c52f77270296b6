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

The same design as LevelDB's writer queue and PostgreSQL's own group commit.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from extender.core.allocation import LedgerUnavailable
from extender.ledger.trail import Tx

T = TypeVar("T")

MAX_BATCH = 64


@dataclass(eq=False)
class _Write(Generic[T]):
    """One queued write: what to run, and once it ran, its result or error."""

    op: str
    run: Callable[[Tx], T]
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
    ) -> None:
        self._transact = transact
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: deque[_Write[Any]] = deque()  # the front one leads (is running)

    def run(self, op: str, write: Callable[[Tx], T]) -> T:
        """``write(tx)`` once its transaction has committed (or its error)."""
        mine: _Write[T] = _Write(op, write)
        with self._lock:
            self._queue.append(mine)
            leads = len(self._queue) == 1
        if not leads:
            mine.wake.wait()  # set when carried by a leader, or when it is our turn
            if mine.done:
                return mine.outcome()
        with self._lock:
            batch = list(itertools.islice(self._queue, self._max_batch))
        try:
            self._commit(batch)
        finally:
            with self._lock:
                for _ in batch:
                    self._queue.popleft()
                following = self._queue[0] if self._queue else None
            for w in batch:
                w.done = True
                w.wake.set()
            if following is not None:
                following.wake.set()  # not done: it leads the next batch
        return mine.outcome()

    def _commit(self, batch: list[_Write[Any]]) -> None:
        """One transaction for the batch; each write's result or error on it."""
        try:
            with self._transact([w.op for w in batch]) as tx:
                if len(batch) == 1:
                    batch[0].result = batch[0].run(tx)
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
            w.result = w.run(tx)
    except LedgerUnavailable:
        raise
    except Exception as e:
        w.error = e
