"""The ledger never grants a GPU more memory than it has: the rule, and the ledger on both
backends with writers racing for the same GPU (issue 24 item 5)."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import replace
from decimal import Decimal

import pytest

from extender.core.allocation import CapacityExceeded, Sharing
from extender.ledger import open_ledger
from extender.ledger.base import Ledger
from extender.ledger.capacity import Shortfall, shortfall
from extender.ledger.dialect import NullHooks
from extender.wire.clock import ManualClock

from .helpers import GIB, NODE, decision, grant

TOTAL = 80 * GIB


# ---- the rule, over plain data ---------------------------------------------------------
def test_a_grant_that_fills_the_gpu_exactly_fits_one_mib_more_does_not() -> None:
    assert shortfall([grant("G", 30 * GIB)], {"G": 50 * GIB}, {}) is None
    assert shortfall([grant("G", 30 * GIB + 1)], {"G": 50 * GIB}, {}) == Shortfall(
        "G", 30 * GIB + 1, 30 * GIB, TOTAL
    )


def test_grants_of_one_decision_on_the_same_gpu_add_up() -> None:
    two = [grant("G", 30 * GIB), grant("G", 30 * GIB)]
    assert shortfall(two, {"G": 30 * GIB}, {}) == Shortfall("G", 60 * GIB, 50 * GIB, TOTAL)


def test_an_exclusive_grant_needs_the_whole_gpu_free() -> None:
    whole = grant("G", TOTAL)
    assert whole.sharing is Sharing.EXCLUSIVE
    assert shortfall([whole], {}, {}) is None
    assert shortfall([whole], {"G": 1}, {}) == Shortfall("G", TOTAL, TOTAL - 1, TOTAL)


def test_only_the_gpu_asked_for_counts_and_the_first_short_one_is_named() -> None:
    grants = [grant("A", 10 * GIB), grant("B", 10 * GIB, index=1)]
    assert shortfall(grants, {"C": TOTAL}, {}) is None
    full = {"A": TOTAL, "B": TOTAL}
    assert shortfall(grants, full, {}) == Shortfall("A", 10 * GIB, 0, TOTAL)


def test_the_node_record_can_lower_the_limit_never_raise_it() -> None:
    g = grant("G", 40 * GIB)
    assert shortfall([g], {"G": 20 * GIB}, {"G": 40 * GIB}) == Shortfall(
        "G", 40 * GIB, 20 * GIB, 40 * GIB
    )
    assert shortfall([g], {"G": 60 * GIB}, {"G": 1000 * GIB}) == Shortfall(
        "G", 40 * GIB, 20 * GIB, TOTAL
    )


def test_free_is_never_negative_and_dra_records_are_not_refused() -> None:
    assert shortfall([grant("G", 1)], {"G": 2 * TOTAL}, {}) == Shortfall("G", 1, 0, TOTAL)
    dra = replace(grant("G", 40 * GIB), claim="ml/claim-1")
    assert shortfall([dra], {"G": TOTAL}, {}) is None


# ---- the ledger, SQLite file and PostgreSQL --------------------------------------------
def test_ledger_refuses_an_over_grant_and_writes_nothing(
    ledger: Ledger, clock: ManualClock
) -> None:
    t = clock.now()
    ledger.record_decision(decision("a", grant("GPU-0", 50 * GIB), at=t))
    events = len(ledger.list_events(0, 1000))
    with pytest.raises(CapacityExceeded) as refused:
        ledger.record_decision(decision("b", grant("GPU-0", 50 * GIB), at=t + 1))
    e = refused.value
    assert (e.gpu_uuid, e.node, e.asked_mib, e.free_mib) == ("GPU-0", NODE.name, 50 * GIB, 30 * GIB)
    assert str(e).startswith(f"GPU GPU-0 on {NODE.name}: 30720 MiB free")
    assert ledger.for_pod("b") == []  # no row
    assert len(ledger.list_events(0, 1000)) == events  # no event
    assert ledger.verify_chain().ok
    ledger.record_decision(decision("c", grant("GPU-0", 30 * GIB), at=t + 2))  # what is left
    assert sum(a.grant.memory_mib for a in ledger.active()) == TOTAL


def test_ended_and_failed_grants_free_their_memory(ledger: Ledger, clock: ManualClock) -> None:
    t = clock.now()
    ledger.record_decision(decision("a", grant("GPU-0", 60 * GIB), at=t))
    ledger.fail_bind("a", t + 1, "409 Conflict")
    ledger.record_decision(decision("b", grant("GPU-0", 60 * GIB), at=t + 2))
    ledger.mark_bound("b", t + 3)
    ledger.mark_started("b", t + 4)  # running still counts
    with pytest.raises(CapacityExceeded):
        ledger.record_decision(decision("c", grant("GPU-0", 60 * GIB), at=t + 5))
    ledger.release("b", t + 6, "completed")
    ledger.record_decision(decision("c", grant("GPU-0", 60 * GIB), at=t + 7))


def test_the_node_record_caps_a_gpu_at_its_recorded_memory(
    ledger: Ledger, clock: ManualClock
) -> None:
    t = clock.now()
    ledger.record_node(NODE, [("GPU-0", "A10G", 24 * GIB)], Decimal("1.00"), t)
    with pytest.raises(CapacityExceeded) as refused:  # the grant claims 80 GiB: 24 it is
        ledger.record_decision(decision("a", grant("GPU-0", 30 * GIB), at=t))
    assert (refused.value.total_mib, refused.value.free_mib) == (24 * GIB, 24 * GIB)


def test_writers_racing_for_one_gpu_never_exceed_it(ledger_target: str) -> None:
    """Two ledgers (two replicas' connections) x 3 threads, 10 GiB pods on two 80 GiB GPUs:
    exactly 8 per GPU are granted, every other attempt is refused, nothing over."""
    clock = ManualClock()
    replicas = [open_ledger(ledger_target, clock, hooks=NullHooks()) for _ in range(2)]
    won: dict[str, list[str]] = defaultdict(list)
    refused: dict[str, list[str]] = defaultdict(list)
    lock = threading.Lock()

    def writer(ledger: Ledger, k: int) -> None:
        for i in range(12):
            gpu = f"GPU-{i % 2}"
            uid = f"w{k}-{i}"
            try:
                ledger.record_decision(decision(uid, grant(gpu, 10 * GIB), at=1.0 + i))
                outcome = won
            except CapacityExceeded as e:
                assert e.gpu_uuid == gpu
                outcome = refused
            with lock:
                outcome[gpu].append(uid)

    threads = [threading.Thread(target=writer, args=(replicas[k % 2], k)) for k in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    try:
        assert {g: len(u) for g, u in won.items()} == {"GPU-0": 8, "GPU-1": 8}
        assert {g: len(u) for g, u in refused.items()} == {"GPU-0": 28, "GPU-1": 28}
        committed: dict[str, int] = defaultdict(int)
        for a in replicas[0].active():
            committed[a.grant.gpu_uuid] += a.grant.memory_mib
        assert committed == {"GPU-0": TOTAL, "GPU-1": TOTAL}
        assert {a.pod.uid for a in replicas[1].active()} == {u for g in won.values() for u in g}
        assert replicas[1].verify_chain().ok
    finally:
        for r in replicas:
            r.close()
