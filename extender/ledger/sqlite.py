"""SQLite dialect: one file, WAL, safe across threads and processes.

Each thread reads through a connection of its own (autocommit mode, explicit
transactions); every write goes through one connection, taken in turn under a lock.
SQLite lets one writer in at a time anyway, and a connection throws its page cache away
when another connection has written: with a connection per writing thread, each
transaction read the pages the previous one (another thread's) had just written back
from the file, about 25 ``pread`` calls per bind in bench/throughput.py. Writes use
``BEGIN IMMEDIATE`` so the write lock is taken up front — two writers (processes) never
both read and then both try to upgrade (which SQLite resolves by failing one with
SQLITE_BUSY mid-transaction). ``busy_timeout`` makes a waiting writer sleep-retry
instead of failing; past it (3 s by default, below kube-scheduler's 5 s extender timeout)
the write raises ``LedgerUnavailable`` and the bind answers an error in time.
``synchronous=FULL``: a commit has reached the disk before ``record_decision``
returns, so a crash or power loss cannot un-make a Binding's record.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from decimal import Decimal

from extender.core.allocation import LedgerUnavailable
from extender.ledger.dialect import UniqueConflict

TYPES = {"id": "INTEGER PRIMARY KEY AUTOINCREMENT", "real": "REAL", "money": "TEXT", "text": "TEXT"}


class SqliteDialect:
    name = "sqlite"
    types = TYPES

    def __init__(self, path: str, busy_timeout_s: float = 3.0, synchronous: str = "FULL") -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        self.synchronous = synchronous
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        # the writers' connection, and its turn: reentrant, so a write begun inside a
        # write fails as SQLite fails it (a transaction within a transaction)
        self._writer: sqlite3.Connection | None = None
        self._turn = threading.RLock()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    def _write_conn(self) -> sqlite3.Connection:
        """The writers' connection (the caller holds ``_turn``)."""
        if self._writer is None:
            self._writer = self._connect()
        return self._writer

    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise LedgerUnavailable("ledger is closed")
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        except sqlite3.Error as exc:
            raise LedgerUnavailable(f"sqlite {self.path}: {exc}") from exc
        with self._lock:
            self._all.append(conn)
        return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        # the turn is waited for as long as SQLite waits for another process's lock
        if not self._turn.acquire(timeout=self.busy_timeout_s):
            raise LedgerUnavailable(
                f"sqlite {self.path}: cannot begin write: another write in this process "
                f"held the database for {self.busy_timeout_s:g} s"
            )
        try:
            with self._written() as conn:
                yield conn
        finally:
            self._turn.release()

    @contextmanager
    def _written(self) -> Iterator[sqlite3.Connection]:
        conn = self._write_conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise LedgerUnavailable(f"sqlite {self.path}: cannot begin write: {exc}") from exc
        committing = False  # past the body: a failure now may follow a commit
        try:
            yield conn
            committing = True
            conn.execute("COMMIT")
        except BaseException as exc:
            _rollback(conn)
            if isinstance(exc, sqlite3.IntegrityError):
                raise UniqueConflict(str(exc)) from exc
            if isinstance(exc, sqlite3.Error):
                message = f"sqlite {self.path}: {exc}"
                raise LedgerUnavailable(message, maybe_written=committing) from exc
            raise

    @contextmanager
    def savepoint(self, conn: sqlite3.Connection) -> Iterator[None]:
        try:
            conn.execute("SAVEPOINT part")
            try:
                yield
            except BaseException as exc:
                if isinstance(exc, sqlite3.Error) and not isinstance(exc, sqlite3.IntegrityError):
                    raise  # the transaction's failure, not this part's
                conn.execute("ROLLBACK TO part")
                conn.execute("RELEASE part")
                if isinstance(exc, sqlite3.IntegrityError):
                    raise UniqueConflict(str(exc)) from exc
                raise
            conn.execute("RELEASE part")
        except sqlite3.Error as exc:
            raise LedgerUnavailable(f"sqlite {self.path}: {exc}") from exc

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute("BEGIN")  # one snapshot for multi-statement reads
            try:
                yield conn
            finally:
                _rollback(conn)
        except sqlite3.Error as exc:
            raise LedgerUnavailable(f"sqlite {self.path}: {exc}") from exc

    def migrate(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.write()  # BEGIN IMMEDIATE already serialises processes

    def sql(self, statement: str) -> str:
        return statement

    def money(self, value: Decimal | None) -> str | None:
        return None if value is None else str(value)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._all, self._writer = self._all, [], None
        for c in conns:
            c.close()


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
