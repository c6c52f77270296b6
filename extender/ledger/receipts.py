"""The ``receipts`` table: what each allocation's pod received, beside what it was granted.

One row per allocation that kubelet's pod-resources has settled (``core.received``):
the GPU the pod holds for that grant, the memory and the price it is billed at, and
kubelet's device ids. Chargeback bills a row with a receipt by its receipt. Every
receipt written or changed appends a ``received`` event carrying all of it, so the
hash chain covers what is billed, and ``check`` holds the table against the trail as
``replay.py`` does for allocations.

A receipt is written when it changes, not per report: the intake submits a pod's
holding when it differs from the last one it submitted, and an unchanged receipt is
not rewritten (no event).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from extender.core.allocation import Allocation, EventKind
from extender.core.received import Held, Receipt, receipts
from extender.ledger import allocations, nodes
from extender.ledger.dialect import to_price
from extender.ledger.named import Shape, fetch_all, fetch_one
from extender.ledger.records import EventRecord
from extender.ledger.schema import ACTIVE_SQL
from extender.ledger.trail import Tx

RECEIPT = Shape(
    Receipt,
    {"price_per_hour": to_price, "memory_mib": int, "gpu_total_mib": int, "allocation_id": int},
)
SELECT = f"SELECT {RECEIPT.columns} FROM receipts"
SELECT_ONE = f"{SELECT} WHERE allocation_id = ?"
ALL = f"{SELECT} ORDER BY allocation_id"
IN_WINDOW = (
    f"SELECT {', '.join('r.' + c for c in RECEIPT.fields)} FROM receipts r"
    " JOIN allocations a ON a.id = r.allocation_id WHERE a.status <> 'failed'"
    " AND a.decided_at < ? AND (a.ended_at IS NULL OR a.ended_at > ?)"
)
ACTIVE_ROWS = f"{allocations.SELECT} WHERE pod_uid = ? AND status IN {ACTIVE_SQL} ORDER BY id"
INSERT = (
    "INSERT INTO receipts (allocation_id, pod_uid, node, granted_gpu, gpu_uuid, memory_mib,"
    " gpu_total_mib, price_per_hour, devices, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
UPDATE = (
    "UPDATE receipts SET gpu_uuid = ?, memory_mib = ?, gpu_total_mib = ?, price_per_hour = ?,"
    " devices = ?, at = ? WHERE allocation_id = ?"
)


def for_ids(ids: Sequence[int]) -> tuple[str, tuple[int, ...]]:
    """The receipts of these allocations (an audit page)."""
    marks = ", ".join("?" * len(ids)) or "NULL"
    return f"{SELECT} WHERE allocation_id IN ({marks})", tuple(ids)


def record(tx: Tx, held: Held, at: float) -> list[Receipt]:
    """Settle the pod's active rows from what kubelet says it holds; the receipts that
    are new or changed (each with a ``received`` event)."""
    rows = fetch_all(tx.execute(ACTIVE_ROWS, (held.pod_uid,)), allocations.ALLOCATION)
    if not rows:
        return []
    node = fetch_one(tx.execute(nodes.SELECT_NODE, (held.node,)), nodes.NODE)
    per_gpu = node.gpu_price_per_hour if node is not None else None
    totals = {u: t for u, _, t in node.gpus} if node is not None else {}
    out = []
    for r in receipts(rows, held, per_gpu, totals, at):
        if _write(tx, r, _row(rows, r.allocation_id)):
            out.append(r)
    return out


def _row(rows: Sequence[Allocation], allocation_id: int) -> Allocation:
    return next(a for a in rows if a.id == allocation_id)


def _write(tx: Tx, r: Receipt, a: Allocation) -> bool:
    old = fetch_one(tx.execute(SELECT_ONE, (r.allocation_id,)), RECEIPT)
    if old is not None and _billed(old) == _billed(r):
        return False
    price = tx.dialect.money(r.price_per_hour)
    if old is None:
        tx.execute(
            INSERT,
            (
                r.allocation_id,
                a.pod.uid,
                a.node.name,
                r.granted_gpu,
                r.gpu_uuid,
                r.memory_mib,
                r.gpu_total_mib,
                price,
                r.devices,
                r.at,
            ),
        )
    else:
        tx.execute(
            UPDATE,
            (r.gpu_uuid, r.memory_mib, r.gpu_total_mib, price, r.devices, r.at, r.allocation_id),
        )
    tx.append_event(r.at, EventKind.RECEIVED, payload(r), a.pod.uid, a.node.name, r.gpu_uuid)
    return True


def _billed(r: Receipt) -> tuple[Any, ...]:
    """What a receipt says, less when it was said."""
    price = None if r.price_per_hour is None else r.price_per_hour.normalize()
    return (r.granted_gpu, r.gpu_uuid, r.memory_mib, r.gpu_total_mib, price, r.devices)


def payload(r: Receipt) -> dict[str, Any]:
    return {
        "allocation_ids": [r.allocation_id],
        "granted_gpu": r.granted_gpu,
        "gpu_uuid": r.gpu_uuid,
        "memory_mib": r.memory_mib,
        "gpu_total_mib": r.gpu_total_mib,
        "price_per_hour": None if r.price_per_hour is None else str(r.price_per_hour),
        "devices": r.devices,
    }


# ---- the table against the trail --------------------------------------------------------


@dataclass
class ReceiptReplay:
    """What each receipt must hold: the last ``received`` event naming its allocation."""

    want: dict[int, tuple[Any, ...]] = field(default_factory=dict)

    def feed(self, e: EventRecord) -> None:
        if e.kind != EventKind.RECEIVED:
            return
        p = json.loads(e.payload)
        price = p["price_per_hour"]
        (i,) = p["allocation_ids"]
        got = Receipt(
            int(i),
            p["granted_gpu"],
            p["gpu_uuid"],
            int(p["memory_mib"]),
            int(p["gpu_total_mib"]),
            None if price is None else Decimal(str(price)),
            p["devices"],
            e.at,
        )
        self.want[int(i)] = (*_billed(got), e.at)


def check(replay: ReceiptReplay, rows: Iterable[Receipt]) -> tuple[int, str] | None:
    """The first receipt that differs from the trail, was written outside it, or was
    deleted: (allocation id, why)."""
    seen: set[int] = set()
    for r in rows:
        seen.add(r.allocation_id)
        want = replay.want.get(r.allocation_id)
        if want is None:
            return r.allocation_id, f"receipt of allocation {r.allocation_id} is not in the trail"
        if (*_billed(r), r.at) != want:
            return r.allocation_id, f"receipt of allocation {r.allocation_id} was edited"
    gone = sorted(set(replay.want) - seen)
    return (gone[0], f"receipt of allocation {gone[0]} was deleted") if gone else None


def by_allocation(found: Iterable[Receipt]) -> Mapping[int, Receipt]:
    return {r.allocation_id: r for r in found}
