"""Granted vs received in the ledger: receipts beside grants, the bill follows what was
received, and the hash chain covers every receipt. On a SQLite file and on PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from extender.core.allocation import EventKind, Sharing
from extender.core.received import Held
from extender.ledger import chargeback_report, open_ledger
from extender.ledger.base import Ledger
from extender.wire.clock import ManualClock

from .helpers import GIB, NODE, decision, grant
from .test_tamper import sql, verify

H = 3600.0
# a node with GPUs of different sizes, so the GPU received changes the price
GPUS = [("GPU-0", "H100", 80 * GIB), ("GPU-1", "H100", 40 * GIB), ("GPU-2", "H100", 80 * GIB)]


def held(uid: str, *ids: tuple[str, str]) -> Held:
    return Held(uid, NODE.name, tuple(ids))


def seed(ledger: Ledger, t: float, price: Decimal | None = Decimal("4.00")) -> None:
    ledger.record_node(NODE, GPUS, price, t)
    # "whole": all of GPU-0 ($4/h); "slice": 20 GiB of GPU-2 ($1/h); "right": 10 GiB of GPU-1
    ledger.record_decision(decision("whole", grant("GPU-0", 80 * GIB), at=t, ns="whole"))
    ledger.record_decision(decision("slice", grant("GPU-2", 20 * GIB), at=t, ns="slice"))
    right = grant("GPU-1", 10 * GIB, total=40 * GIB)
    ledger.record_decision(decision("right", right, at=t, ns="right"))
    for uid in ("whole", "slice", "right"):
        ledger.mark_bound(uid, t + 1)


def test_the_bill_follows_the_gpu_received(ledger: Ledger, clock: ManualClock) -> None:
    t = clock.now()
    seed(ledger, t)
    # kubelet (stock plugin, time-slicing) put "whole" and "slice" on GPU-1's replicas
    whole = ledger.record_received(held("whole", ("GPU-1::3", "GPU-1")), t + 2)
    part = ledger.record_received(held("slice", ("GPU-1::5", "GPU-1")), t + 2)
    right = ledger.record_received(held("right", ("GPU-1::0", "GPU-1")), t + 2)
    # an exclusive grant received on GPU-1 is all of GPU-1: its 40 GiB at the GPU's $4/h
    assert [(r.gpu_uuid, r.memory_mib, r.price_per_hour) for r in whole] == [
        ("GPU-1", 40 * GIB, Decimal("4.00"))
    ]
    # a 20 GiB slice received on a 40 GiB GPU is half of it: $2/h (granted: $1/h)
    assert [(r.gpu_uuid, r.memory_mib, r.price_per_hour) for r in part] == [
        ("GPU-1", 20 * GIB, Decimal("2.00"))
    ]
    assert [(r.matches, r.devices) for r in right] == [(True, "GPU-1::0")]
    assert right[0].price_per_hour == Decimal("1.00")  # as granted: 10 of 40 GiB at $4/h
    report = chargeback_report(ledger, t, t + 2 * H, "namespace", t + 2 * H)
    by = {g.key: (g.cost, g.gib_hours) for g in report.groups}
    assert by == {
        "whole": (Decimal("8.00"), Decimal("80.0000")),
        "slice": (Decimal("4.00"), Decimal("40.0000")),
        "right": (Decimal("2.00"), Decimal("20.0000")),
    }
    assert verify_ok(ledger)


def test_a_receipt_is_written_once_and_again_only_when_it_changes(
    ledger: Ledger, clock: ManualClock
) -> None:
    t = clock.now()
    seed(ledger, t)
    assert ledger.record_received(held("slice", ("GPU-2::1", "GPU-2")), t + 2)
    assert ledger.record_received(held("slice", ("GPU-2::1", "GPU-2")), t + 7) == []
    (moved,) = ledger.record_received(held("slice", ("GPU-1::4", "GPU-1")), t + 9)
    assert (moved.granted_gpu, moved.gpu_uuid, moved.at) == ("GPU-2", "GPU-1", t + 9)
    kinds = [e.kind for e in ledger.list_events(0, 1000)]
    assert kinds.count(EventKind.RECEIVED.value) == 2
    (row,) = ledger.for_pod("slice")
    (got,) = ledger.receipts_for([row.id])
    assert got == moved


def test_grants_and_gpus_without_a_counterpart(ledger: Ledger, clock: ManualClock) -> None:
    """Two GPUs granted, replicas of one held: the held one is received as granted, the
    other keeps its grant's bill (no receipt); an ended pod is not settled."""
    t = clock.now()
    ledger.record_node(NODE, GPUS, Decimal("4.00"), t)
    two = (grant("GPU-0", 10 * GIB), grant("GPU-1", 10 * GIB, total=40 * GIB, index=1))
    ledger.record_decision(decision("two", *two, at=t))
    got = ledger.record_received(held("two", ("GPU-1::0", "GPU-1"), ("GPU-1::1", "GPU-1")), t + 1)
    assert [(r.granted_gpu, r.gpu_uuid, r.devices) for r in got] == [
        ("GPU-1", "GPU-1", "GPU-1::0,GPU-1::1")
    ]
    ledger.release("two", t + 5, "completed")
    assert ledger.record_received(held("two", ("GPU-0::0", "GPU-0")), t + 6) == []


def test_an_unpriced_node_leaves_a_moved_grant_unpriced(ledger: Ledger, clock: ManualClock) -> None:
    t = clock.now()
    seed(ledger, t, price=None)
    (r,) = ledger.record_received(held("slice", ("GPU-1::5", "GPU-1")), t + 2)
    assert r.price_per_hour is None
    report = chargeback_report(ledger, t, t + H, "namespace", t + H)
    assert {g.key: g.cost for g in report.groups}["slice"] is None  # unknown, never $0


def test_receipts_are_covered_by_the_chain(ledger_target: str) -> None:
    clock = ManualClock()
    t = clock.now()
    ledger = open_ledger(ledger_target, clock)
    try:
        seed(ledger, t)
        ledger.record_received(held("slice", ("GPU-1::5", "GPU-1")), t + 2)
        ledger.record_received(held("right", ("GPU-1::0", "GPU-1")), t + 2)
    finally:
        ledger.close()
    assert verify(ledger_target) == (True, "")
    sql(ledger_target, "UPDATE receipts SET price_per_hour = '0.01' WHERE gpu_uuid = 'GPU-1'")
    ok, why = verify(ledger_target)
    assert not ok and "receipt of allocation" in why and "edited" in why
    sql(ledger_target, "DELETE FROM receipts")
    ok, why = verify(ledger_target)
    assert not ok and "was deleted" in why


def verify_ok(ledger: Ledger) -> bool:
    report = ledger.verify_chain()
    assert report.ok, report.reason
    return True


def test_a_dra_grant_is_received_when_kubelet_lists_its_device(
    ledger: Ledger, clock: ManualClock
) -> None:
    t = clock.now()
    ledger.record_node(NODE, GPUS, Decimal("4.00"), t)
    dra = replace(
        grant("GPU-2", 20 * GIB),
        sharing=Sharing.DRA,
        claim="ml/c1",
        dra_device="gpu.nvidia.com/node-a/gpu-2",
    )
    ledger.record_decision(decision("claimer", dra, at=t))
    other = Held("claimer", NODE.name, (), ("gpu.nvidia.com/node-a/gpu-0",))
    assert ledger.record_received(other, t + 1) == []  # not its device: not settled
    mine = Held("claimer", NODE.name, (), ("gpu.nvidia.com/node-a/gpu-2",))
    (r,) = ledger.record_received(mine, t + 2)
    assert (r.gpu_uuid, r.matches, r.memory_mib, r.price_per_hour, r.devices) == (
        "GPU-2",
        True,
        20 * GIB,
        dra.price_per_hour,
        "gpu.nvidia.com/node-a/gpu-2",
    )
