"""The event trail: write transactions that append to the hash chain, and its reads.

Every ledger write runs in one ``Tx``. Events appended in it take the next sequence
numbers after ``chain_head`` and link to the previous hash (``chain.py``); the head is
written back once, at the end of the transaction, so a transaction's events and the
head it leaves commit together or not at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from extender.core.allocation import EventKind
from extender.ledger.chain import canonical_payload, event_hash
from extender.ledger.dialect import Cursor, Dialect
from extender.ledger.named import Shape, fetch_one, stream
from extender.ledger.records import EventRecord


class Head(NamedTuple):
    seq: int
    hash: str


HEAD_ROW = Shape(Head, {"seq": int, "hash": str})
EVENT = Shape(EventRecord, {"seq": int, "at": float})

HEAD = "SELECT seq, hash FROM chain_head WHERE id = 1"
SET_HEAD = "UPDATE chain_head SET seq = ?, hash = ? WHERE id = 1"
INSERT_HEAD = "INSERT INTO chain_head (id, seq, hash) VALUES (1, 0, ?)"
INSERT_EVENT = f"INSERT INTO events ({EVENT.columns}) VALUES ({', '.join('?' * len(EVENT.fields))})"
SELECT_EVENTS = f"SELECT {EVENT.columns} FROM events WHERE seq > ? ORDER BY seq LIMIT ?"
SELECT_ALL_EVENTS = f"SELECT {EVENT.columns} FROM events ORDER BY seq"
SELECT_EVENT = f"SELECT {EVENT.columns} FROM events WHERE seq = ?"


class Tx:
    """One write transaction: statements, and events appended to the hash chain."""

    def __init__(self, conn: Any, dialect: Dialect) -> None:
        self.conn, self.dialect = conn, dialect
        self._head: Head | None = None

    def execute(self, statement: str, params: Sequence[Any] = ()) -> Cursor:
        cur: Cursor = self.conn.execute(self.dialect.sql(statement), tuple(params))
        return cur

    def append_event(
        self,
        at: float,
        kind: EventKind,
        payload: dict[str, Any],
        pod_uid: str = "",
        node: str = "",
        gpu_uuid: str = "",
    ) -> int:
        if self._head is None:
            self._head = fetch_one(self.execute(HEAD), HEAD_ROW)
            assert self._head is not None, "chain_head is written by the first migration"
        seq, prev = self._head.seq + 1, self._head.hash
        body = canonical_payload(payload)
        digest = event_hash(prev, seq, at, kind.value, pod_uid, node, gpu_uuid, body)
        event = EventRecord(seq, at, kind.value, pod_uid, node, gpu_uuid, body, prev, digest)
        self.execute(INSERT_EVENT, [getattr(event, f) for f in EVENT.fields])
        self._head = Head(seq, digest)
        return seq

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A part of the transaction that a failure undoes alone: its rows (the
        dialect's savepoint) and the events it appended to the chain."""
        head = self._head
        try:
            with self.dialect.savepoint(self.conn):
                yield
        except BaseException:
            self._head = head
            raise

    def flush_head(self) -> None:
        if self._head is not None:
            self.execute(SET_HEAD, self._head)


def read_head(conn: Any, dialect: Dialect) -> Head:
    head = fetch_one(conn.execute(dialect.sql(HEAD)), HEAD_ROW)
    assert head is not None, "chain_head is written by the first migration"
    return head


def event_at(conn: Any, dialect: Dialect, seq: int) -> EventRecord | None:
    return fetch_one(conn.execute(dialect.sql(SELECT_EVENT), (seq,)), EVENT)


def all_events(conn: Any, dialect: Dialect) -> Iterator[EventRecord]:
    """Every event in order, streamed (verification walks the whole trail)."""
    return stream(conn.execute(dialect.sql(SELECT_ALL_EVENTS)), EVENT, 5_000)
