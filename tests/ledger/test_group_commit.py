"""Group commit (extender/ledger/group.py) on both backends: writes queued behind a
running transaction share the next one, each still answered on its own.

To make a batch deterministic, each test holds the ledger's writer queue with a write
that waits on a gate inside its transaction (through the ledger's ``GroupCommit``), then
queues the writes under test one by one behind it and opens the gate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from extender.core.allocation import (
    AlreadyAllocated,
    CapacityExceeded,
    Decision,
    EventKind,
    LedgerUnavailable,
)
from extender.ledger import open_ledger
from extender.ledger.records import AllocationFilter
from extender.ledger.sql import SqlLedger
from extender.wire.clock import ManualClock

from .helpers import GIB, decision, grant


class Held:
    """The writer queue held by a write waiting inside its transaction; writes queued
    behind it run, once the gate opens, in one batch."""

    def __init__(self, ledger: SqlLedger) -> None:
        self.ledger, self.gate = ledger, threading.Event()
        self.threads: list[threading.Thread] = []
        self.answers: dict[str, Any] = {}
        self._start("hold", lambda led: led._group.run("hold", lambda tx: self.gate.wait(10)))

    def queue(self, name: str, call: Callable[[SqlLedger], Any]) -> None:
        """Run ``call`` in a thread of its own, once it waits in the queue."""
        before = len(self.ledger._group._queue)
        self._start(name, call)
        deadline = time.monotonic() + 10
        while len(self.ledger._group._queue) == before:  # queued, in this order
            assert time.monotonic() < deadline, f"{name} never queued"
            time.sleep(0.001)

    def release_holder_only(self) -> None:
        """Open the gate and wait until the next writer leads (its batch formed)."""
        self.gate.set()
        self.threads[0].join(10)
        deadline = time.monotonic() + 10
        while self.ledger._group._queue and self.ledger._group._riders:
            assert time.monotonic() < deadline, "the next writer never took the riders"
            time.sleep(0.001)

    def release(self) -> dict[str, Any]:
        self.gate.set()
        for t in self.threads:
            t.join(10)
        return self.answers

    def _start(self, name: str, call: Callable[[SqlLedger], Any]) -> None:
        def run() -> None:
            try:
                self.answers[name] = call(self.ledger)
            except Exception as e:
                self.answers[name] = e

        t = threading.Thread(target=run, name=name)
        self.threads.append(t)
        t.start()
        if name == "hold":  # the holder leads: wait until it is inside its transaction
            while not self.ledger._group._queue:
                time.sleep(0.001)


@contextmanager
def counted_transactions(ledger: SqlLedger) -> Iterator[list[int]]:
    """The write transactions the ledger opens meanwhile (a one-item list)."""
    count, write = [0], ledger.dialect.write

    def counting() -> Any:
        count[0] += 1
        return write()

    ledger.dialect.write = counting  # type: ignore[method-assign]
    try:
        yield count
    finally:
        ledger.dialect.write = write  # type: ignore[method-assign]


def recording(d: Decision) -> Callable[[SqlLedger], Any]:
    return lambda led: led.record_decision(d)


@pytest.fixture
def sql(ledger_target: str, clock: ManualClock) -> Iterator[SqlLedger]:
    led = open_ledger(ledger_target, clock)
    assert isinstance(led, SqlLedger)
    yield led
    led.close()


def test_writes_queued_behind_a_transaction_commit_together_each_with_its_own_answer(
    sql: SqlLedger, ledger_target: str, clock: ManualClock
) -> None:
    sql.record_decision(decision("held-before", grant("GPU-9", 10 * GIB), at=1.0))
    with counted_transactions(sql) as transactions:
        held = Held(sql)
        for i in range(4):
            held.queue(f"p{i}", recording(decision(f"p{i}", grant(f"GPU-{i}", 60 * GIB), at=2.0)))
        again = decision("held-before", grant("GPU-8", 10 * GIB), at=2.0)
        held.queue("again", lambda led: led.record_decision(again))
        # GPU-0 has 20 GiB left after p0, which is in the same batch, ahead of this one
        over = decision("over", grant("GPU-0", 30 * GIB), at=2.0)
        held.queue("over", lambda led: led.record_decision(over))
        held.queue("bound", lambda led: led.mark_bound("p1", 3.0))
        answers = held.release()
    assert transactions == [2]  # the holder's, then all seven writes in one
    assert [len(answers[f"p{i}"]) for i in range(4)] == [1, 1, 1, 1]
    assert isinstance(answers["again"], AlreadyAllocated)
    assert isinstance(answers["over"], CapacityExceeded)
    assert answers["bound"] is None

    other = open_ledger(ledger_target, clock)  # another connection: each is durable
    try:
        active = other.list_allocations(AllocationFilter(active=True), 0, 100)
        assert sorted(a.pod.uid for a in active) == ["held-before", "p0", "p1", "p2", "p3"]
        assert [a.status for a in active if a.pod.uid == "p1"] == ["bound"]
        kinds = [e.kind for e in other.list_events(0, 100)]
        assert kinds == ["decision"] * 5 + ["bound"]
        assert other.verify_chain().ok
    finally:
        other.close()


def test_a_write_undone_in_its_savepoint_leaves_no_event_in_the_chain(sql: SqlLedger) -> None:
    def appends_then_fails(led: SqlLedger) -> Any:
        def write(tx: Any) -> None:
            tx.append_event(2.0, EventKind.DECISION, {"x": 1}, "ghost")
            tx.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?,?,?)",
                (999, "ghost", 0),
            )
            raise ValueError("refused after writing")

        return led._group.run("ghost", write)

    held = Held(sql)
    held.queue("first", lambda led: led.record_decision(decision("a", at=2.0)))
    held.queue("ghost", appends_then_fails)
    held.queue("last", lambda led: led.record_decision(decision("b", grant("GPU-1", GIB), at=2.0)))
    answers = held.release()
    assert isinstance(answers["ghost"], ValueError)
    assert len(answers["first"]) == len(answers["last"]) == 1
    events = sql.list_events(0, 100)
    assert [(e.seq, e.pod_uid) for e in events] == [(1, "a"), (2, "b")]
    assert sql.verify_chain().ok
    assert sql.active() and {a.pod.uid for a in sql.active()} == {"a", "b"}


def test_a_database_failure_fails_every_write_of_the_batch_and_writes_nothing(
    sql: SqlLedger,
) -> None:
    def broken(led: SqlLedger) -> Any:
        return led._group.run(
            "broken", lambda tx: tx.execute("INSERT INTO no_such_table VALUES (1)")
        )

    held = Held(sql)
    held.queue("a", lambda led: led.record_decision(decision("a", at=2.0)))
    held.queue("broken", broken)
    held.queue("b", lambda led: led.record_decision(decision("b", grant("GPU-1", GIB), at=2.0)))
    answers = held.release()
    for name in ("a", "broken", "b"):
        assert isinstance(answers[name], LedgerUnavailable), (name, answers[name])
        assert "no_such_table" in str(answers[name])
    assert sql.active() == [] and sql.list_events(0, 100) == []
    # the ledger goes on: the next write (a batch of one) commits
    assert len(sql.record_decision(decision("a", at=3.0))) == 1
    assert sql.verify_chain().ok


def _status(ledger_target: str, clock: ManualClock, uid: str) -> list[str]:
    """The pod's rows' statuses as another connection reads them (what is durable)."""
    other = open_ledger(ledger_target, clock)
    try:
        return [a.status.value for a in other.for_pod(uid)]
    finally:
        other.close()


def test_a_bound_status_rides_in_the_next_writers_transaction_without_waiting(
    sql: SqlLedger, ledger_target: str, clock: ManualClock
) -> None:
    sql.record_decision(decision("p1", at=1.0))
    with counted_transactions(sql) as transactions:
        held = Held(sql)
        sql.mark_bound_later("p1", 2.0)  # returns at once, while a transaction runs
        assert [a.status.value for a in sql.for_pod("p1")] == ["reserved"]
        held.queue("p2", recording(decision("p2", grant("GPU-1", GIB), at=3.0)))
        answers = held.release()
    assert len(answers["p2"]) == 1
    assert transactions == [2]  # the holder's; then p2's, which carried the status
    assert _status(ledger_target, clock, "p1") == ["bound"]
    kinds = [e.kind for e in sql.list_events(0, 100)]
    assert kinds == ["decision", "bound", "decision"]  # the rider first in its batch
    assert sql.verify_chain().ok


def test_a_bound_status_no_writer_carries_is_committed_by_the_flusher(
    sql: SqlLedger, ledger_target: str, clock: ManualClock
) -> None:
    sql.record_decision(decision("p1", at=1.0))
    with counted_transactions(sql) as transactions:
        for uid, at in (("p1", 2.0), ("p1", 2.5)):  # the second finds nothing to move
            sql.mark_bound_later(uid, at)
        deadline = time.monotonic() + 10
        while _status(ledger_target, clock, "p1") != ["bound"]:
            assert time.monotonic() < deadline, "the flusher never committed the status"
            time.sleep(0.01)
    assert transactions == [1]  # both riders in one transaction, after the grace
    assert [e.kind for e in sql.list_events(0, 100)] == ["decision", "bound"]


def test_closing_the_ledger_commits_the_statuses_still_waiting(
    ledger_target: str, clock: ManualClock
) -> None:
    led = open_ledger(ledger_target, clock)
    assert isinstance(led, SqlLedger)
    led.record_decision(decision("p1", at=1.0))
    led._group._grace = 60.0  # the flusher would wait: close must not
    led.mark_bound_later("p1", 2.0)
    led.close()
    assert _status(ledger_target, clock, "p1") == ["bound"]
    with pytest.raises(RuntimeError, match="closed"):
        led.mark_bound_later("p1", 3.0)


def test_a_rider_lost_with_its_transaction_is_reported_not_raised(
    sql: SqlLedger, ledger_target: str, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    sql.record_decision(decision("p1", at=1.0))

    def broken(led: SqlLedger) -> Any:
        return led._group.run("broken", lambda tx: tx.execute("INSERT INTO nowhere VALUES (1)"))

    held = Held(sql)
    sql.mark_bound_later("p1", 2.0)
    held.queue("broken", broken)
    with caplog.at_level("WARNING", logger="headroom.ledger"):
        answers = held.release()
    assert isinstance(answers["broken"], LedgerUnavailable)
    (lost,) = [r for r in caplog.records if getattr(r, "event", "") == "ledger.rider_lost"]
    assert getattr(lost, "pod_uid", "") == "p1" and getattr(lost, "op", "") == "mark_bound"
    assert "nowhere" in getattr(lost, "error", "")
    assert _status(ledger_target, clock, "p1") == ["reserved"]  # still billed from decided_at
    sql.mark_started("p1", 4.0)  # the pod's start corrects it
    assert _status(ledger_target, clock, "p1") == ["running"]


def test_flush_waits_for_the_running_transaction_that_carries_a_rider(
    sql: SqlLedger, ledger_target: str, clock: ManualClock
) -> None:
    sql.record_decision(decision("p1", at=1.0))
    held, carrier_gate = Held(sql), threading.Event()
    sql.mark_bound_later("p1", 2.0)
    # the next leader takes the rider, then waits inside its transaction
    held.queue("carrier", lambda led: led._group.run("carrier", lambda tx: carrier_gate.wait(10)))
    held.release_holder_only()
    flushed = threading.Event()

    def flush() -> None:
        sql.flush()
        flushed.set()

    flusher = threading.Thread(target=flush)
    flusher.start()
    assert not flushed.wait(0.3)  # the rider is in a transaction not committed yet
    carrier_gate.set()
    flusher.join(10)
    assert flushed.is_set() and _status(ledger_target, clock, "p1") == ["bound"]
    held.release()


def test_while_decisions_keep_coming_they_carry_the_statuses_and_the_flusher_writes_nothing(
    ledger_target: str, clock: ManualClock
) -> None:
    led = open_ledger(ledger_target, clock)
    assert isinstance(led, SqlLedger)
    led._group._grace = 0.1
    try:
        led.record_decision(decision("p0", grant("GPU-0", GIB), at=1.0))
        with counted_transactions(led) as transactions:
            for i in range(1, 61):  # a bind every 10 ms: each status rides in the next one
                led.mark_bound_later(f"p{i - 1}", 2.0)
                time.sleep(0.01)
                led.record_decision(decision(f"p{i}", grant(f"GPU-{i}", GIB), at=2.0))
            led.flush()
        # 60 decisions, each carrying the status before it: a flusher that committed
        # whatever it found every 0.1 s would add about six more
        assert 60 <= transactions[0] <= 62, transactions
        assert {a.status.value for i in range(60) for a in led.for_pod(f"p{i}")} == {"bound"}
    finally:
        led.close()
