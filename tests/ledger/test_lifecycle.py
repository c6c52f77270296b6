"""Ledger lifecycle on both backends: rows, statuses, events, rollups, findings, nodes."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from extender.core.allocation import AlreadyAllocated, EventKind, Observation, Status
from extender.ledger import open_ledger
from extender.ledger.base import Ledger
from extender.ledger.metrics import LedgerMetrics
from extender.ledger.records import AllocationFilter
from extender.wire.clock import ManualClock

from .helpers import GIB, NODE, decision, grant


def test_decision_writes_one_row_per_grant_and_one_event(
    ledger: Ledger, clock: ManualClock
) -> None:
    t = clock.now()
    allocs = ledger.record_decision(
        decision("u1", grant("GPU-0", 20 * GIB), grant("GPU-1", 80 * GIB, index=1), at=t)
    )
    assert [a.grant.gpu_uuid for a in allocs] == ["GPU-0", "GPU-1"]
    assert {a.status for a in ledger.active()} == {Status.RESERVED}
    stored = ledger.get_allocation(allocs[0].id)
    assert stored is not None and stored.grant.price_per_hour == Decimal("1.00")
    assert stored.pod.labels == {} and stored.node == NODE
    events = ledger.list_events()
    assert [e.kind for e in events] == ["decision"]
    assert f'"allocation_ids":[{allocs[0].id},{allocs[1].id}]' in events[0].payload


def test_second_decision_for_active_pod_is_refused_until_released(
    ledger: Ledger, clock: ManualClock
) -> None:
    t = clock.now()
    ledger.record_decision(decision("u1", at=t))
    with pytest.raises(AlreadyAllocated):
        ledger.record_decision(decision("u1", grant("GPU-7", GIB), at=t + 1))
    assert ledger.release("u1", t + 2, "deleted") == 1
    again = ledger.record_decision(decision("u1", at=t + 3))
    assert len(ledger.for_pod("u1")) == 2
    assert ledger.for_pod("u1")[0].id == again[0].id  # newest first


def test_status_transitions_and_trail(ledger: Ledger, clock: ManualClock) -> None:
    t = clock.now()
    ledger.record_decision(decision("ok", at=t))
    ledger.record_decision(decision("bad", grant("GPU-1", GIB), at=t))
    ledger.mark_bound("ok", t + 1)
    ledger.fail_bind("bad", t + 1, "conflict")
    ledger.mark_started("ok", t + 2)
    ledger.mark_started("ok", t + 9)  # already running: no change, no event
    (ok,) = ledger.for_pod("ok")
    (bad,) = ledger.for_pod("bad")
    assert (ok.status, ok.bound_at, ok.started_at) == (Status.RUNNING, t + 1, t + 2)
    assert (bad.status, bad.ended_at, bad.end_reason) == (Status.FAILED, t + 1, "conflict")
    assert [a.pod.uid for a in ledger.active()] == ["ok"]
    assert ledger.release_node(NODE.name, t + 5, "spot-interruption") == 1
    assert ledger.active() == []
    kinds = [e.kind for e in ledger.list_events()]
    assert kinds == ["decision", "decision", "bound", "bind-failed", "started", "released"]
    assert ledger.verify_chain().ok


def test_observe_keeps_a_bounded_time_weighted_rollup(ledger: Ledger, clock: ManualClock) -> None:
    t = clock.now()
    ledger.record_decision(decision("u1", at=t))
    ledger.mark_started("u1", t)
    ledger.observe([Observation("u1", "GPU-0", 1000, 10.0)], t + 10)  # weight 10
    ledger.observe([Observation("u1", "GPU-0", 4000, 40.0)], t + 40)  # weight 30
    ledger.observe([Observation("u1", "GPU-0", 9000, None)], t + 1000)  # gap capped at 60
    ledger.observe([Observation("nobody", "GPU-0", 5, None)], t + 1000)  # no row: ignored
    (a,) = ledger.for_pod("u1")
    assert a.obs_count == 3 and a.obs_peak_mib == 9000
    assert a.obs_mean_mib == pytest.approx((1000 * 10 + 4000 * 30 + 9000 * 60) / 100)
    assert a.obs_mean_sm == pytest.approx((10 * 10 + 40 * 30) / 40)


def test_discrepancies_are_deduplicated_while_they_persist(
    ledger: Ledger, clock: ManualClock, metrics: LedgerMetrics
) -> None:
    t = clock.now()
    for i, mib in enumerate((100, 300, 200)):
        ledger.record_discrepancy(EventKind.OVERRUN, "n", "GPU-0", "u1", mib, "over", t + i)
    ledger.record_discrepancy(EventKind.OVERRUN, "n", "GPU-0", "u1", 50, "again", t + 10_000)
    found = ledger.list_discrepancies(False, t)
    assert [(d.count, d.max_amount_mib, d.closed_at) for d in found] == [
        (3, 300, t + 2),
        (1, 50, None),
    ]
    assert [d.id for d in ledger.list_discrepancies(True, t + 10_000)] == [found[1].id]
    assert [e.kind for e in ledger.list_events()] == ["overrun", "overrun"]
    assert metrics.discrepancies.labels("overrun")._value.get() == 2
    with pytest.raises(ValueError):
        ledger.record_discrepancy(EventKind.BOUND, "n", "g", "u", 1, "", t)


def test_nodes_keep_price_periods(ledger: Ledger, clock: ManualClock) -> None:
    t = clock.now()
    gpus = [("GPU-0", "H100", 80 * GIB), ("GPU-1", "H100", 80 * GIB)]
    ledger.record_node(NODE, gpus, Decimal("4.00"), t)
    ledger.record_node(NODE, gpus, Decimal("4.00"), t + 60)  # heartbeat: same period
    ledger.record_node(NODE, gpus, Decimal("1.50"), t + 3600)  # spot price moved
    ledger.node_gone(NODE.name, t + 7200, "deleted")
    periods = ledger.node_periods(t, t + 10_000)
    assert [(p.gpu_price_per_hour, p.since, p.until) for p in periods] == [
        (Decimal("4.00"), t, t + 3600),
        (Decimal("1.50"), t + 3600, t + 7200),
    ]
    (n,) = ledger.nodes()
    assert (n.gpu_count, n.gpu_total_mib, n.gone_at, n.last_seen) == (
        2,
        160 * GIB,
        t + 7200,
        t + 7200,
    )
    assert n.gpus[1] == ("GPU-1", "H100", 80 * GIB)


def test_list_allocations_filters_and_keyset_pages(ledger: Ledger, clock: ManualClock) -> None:
    t = clock.now()
    for i in range(5):
        g = grant("GPU-0", 16 * GIB)  # five fit one 80 GiB GPU
        ledger.record_decision(decision(f"u{i}", g, at=t + i, ns="a" if i % 2 else "b"))
    ledger.release("u0", t + 10, "done")
    assert [a.pod.uid for a in ledger.list_allocations(AllocationFilter(namespace="a"))] == [
        "u1",
        "u3",
    ]
    assert len(ledger.list_allocations(AllocationFilter(active=True))) == 4
    assert [a.pod.uid for a in ledger.list_allocations(AllocationFilter(pod="pod-u2"))] == ["u2"]
    assert [a.pod.uid for a in ledger.list_allocations(AllocationFilter(start=t + 11))] == [
        "u1",
        "u2",
        "u3",
        "u4",
    ]
    assert [a.pod.uid for a in ledger.list_allocations(AllocationFilter(end=t + 2))] == ["u0", "u1"]
    first = ledger.list_allocations(AllocationFilter(), 0, 2)
    rest = ledger.list_allocations(AllocationFilter(), first[-1].id, 10)
    assert [a.pod.uid for a in first + rest] == [f"u{i}" for i in range(5)]


def test_reopen_keeps_schema_and_data(ledger_target: str, clock: ManualClock) -> None:
    first = open_ledger(ledger_target, clock)
    first.record_decision(decision("u1", at=clock.now()))
    first.close()
    second = open_ledger(ledger_target, clock)  # migrations already applied: a no-op
    try:
        assert [a.pod.uid for a in second.active()] == ["u1"]
        assert second.verify_chain().ok
    finally:
        second.close()


def test_unreachable_database_raises_ledger_unavailable(tmp_path: Path, clock: ManualClock) -> None:
    from extender.core.allocation import LedgerUnavailable
    from extender.ledger.sqlite import SqliteDialect

    from .pg import free_port

    with pytest.raises(LedgerUnavailable):
        open_ledger(f"postgresql://postgres@127.0.0.1:{free_port()}/none", clock)
    with pytest.raises(LedgerUnavailable):
        open_ledger(str(tmp_path), clock)  # a directory is no database file
    dialect = SqliteDialect(str(tmp_path / "x.db"), busy_timeout_s=0.1)
    blocker = SqliteDialect(str(tmp_path / "x.db"))
    from extender.ledger.sql import SqlLedger

    led = SqlLedger(dialect)
    with blocker.write(), pytest.raises(LedgerUnavailable):  # another process holds the lock
        led.record_decision(decision("u1", at=clock.now()))
    assert led.active() == []
    led.close()
    blocker.close()
