"""An unknown price is unknown everywhere, never $0: a grant and a node period without a
price are stored as NULL, chargeback leaves them out of every sum and says so, and a
ledger written before prices could be unknown (schema v1) migrates with its rows, ids
and hash chain intact. On a SQLite file and on PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

import extender.ledger.migrate as ledger_migrate
from extender.ledger import open_ledger
from extender.ledger.base import Ledger
from extender.ledger.chargeback import chargeback_report
from extender.ledger.exports import report_csv, report_dict
from extender.ledger.records import AllocationFilter
from extender.ledger.schema import MIGRATIONS
from extender.wire.clock import ManualClock

from .helpers import GIB, NODE, decision, grant

H = 3600.0
GPUS = [("GPU-0", "H100", 80 * GIB)]
OTHER = replace(NODE, name="node-b", instance_type="g99.unlisted")


def test_unpriced_grants_and_nodes_stay_unknown(ledger: Ledger, clock: ManualClock) -> None:
    t = clock.now()
    ledger.record_node(NODE, GPUS, Decimal("4.00"), t)
    ledger.record_node(OTHER, [("GPU-9", "H100", 80 * GIB)], None, t)
    ledger.record_decision(decision("a", grant("GPU-0", 40 * GIB), at=t, ns="priced"))
    free = replace(grant("GPU-9", 20 * GIB), price_per_hour=None)
    ledger.record_decision(decision("b", free, at=t, ns="unpriced", node=OTHER))
    (row,) = ledger.for_pod("b")
    assert row.grant.price_per_hour is None  # NULL in the table, not 0

    r = chargeback_report(ledger, t, t + H, "namespace", now=t + H)
    groups = {g.key: g for g in r.groups}
    assert groups["priced"].cost == Decimal("2.00")
    assert groups["unpriced"].cost is None and groups["unpriced"].unpriced_gib_hours == 20
    nodes = {n.node: n for n in r.nodes}
    assert (nodes["node-a"].cost, nodes["node-a"].idle) == (Decimal("4.00"), Decimal("2.00"))
    assert nodes["node-b"].unpriced and nodes["node-b"].cost is None
    assert nodes["node-b"].idle is None and not nodes["node-b"].oversubscribed
    # the totals are of what is known, and say what is not
    assert (r.total_node_cost, r.total_charged, r.total_idle) == (
        Decimal("4.00"),
        Decimal("2.00"),
        Decimal("2.00"),
    )
    assert r.unpriced_nodes == ("node-b",) and r.unpriced_gib_hours == 20

    body = report_dict(r)
    assert body["unpriced_nodes"] == ["node-b"]
    groups_out = body["groups"]
    assert isinstance(groups_out, list)
    assert [g["cost"] for g in groups_out] == ["2.00", None]
    csv_rows = report_csv(r).splitlines()
    assert csv_rows[2].split(",")[3] == "unpriced"


def test_a_v1_ledger_migrates_with_its_rows_and_chain(
    ledger_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock()
    t = clock.now()
    with monkeypatch.context() as m:
        m.setattr(ledger_migrate, "MIGRATIONS", MIGRATIONS[:1])  # the schema as first shipped
        old = open_ledger(ledger_target, clock)
        old.record_node(NODE, GPUS, Decimal("4.00"), t)
        for uid in ("a", "b", "c"):
            old.record_decision(decision(uid, grant("GPU-0", 10 * GIB), at=t))
        old.release("b", t + 60, "done")
        before = {a.id: a for a in old.list_allocations(AllocationFilter())}
        old.close()

    new = open_ledger(ledger_target, clock)  # applies v2 on open
    try:
        assert {a.id: a for a in new.list_allocations(AllocationFilter())} == before
        assert new.verify_chain().ok
        new.record_decision(decision("d", replace(grant("GPU-0", GIB), price_per_hour=None), at=t))
        (d,) = new.for_pod("d")
        assert d.id > max(before) and d.grant.price_per_hour is None  # ids never reused
        new.record_node(NODE, GPUS, None, t + 1)  # the type lost its price: a NULL period
        periods = new.node_periods(t, t + H)
        assert [p.gpu_price_per_hour for p in periods] == [Decimal("4.00"), None]
    finally:
        new.close()
