"""The ``nodes`` and ``node_periods`` tables: what each node is, and at which price.

A node's row holds its current state; a price period opens whenever its GPU price,
GPU count or kind changes (and closes when it leaves), so chargeback bills each
stretch of time at the price it had then.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from extender.core.allocation import EventKind, NodeRef
from extender.ledger.dialect import to_price
from extender.ledger.named import Shape, fetch_one
from extender.ledger.records import NodePeriod, NodeRecord
from extender.ledger.trail import Tx


def gpus_from_json(text: str) -> list[tuple[str, str, int]]:
    return [(str(u), str(m), int(t)) for u, m, t in json.loads(text)]


def gpus_json(gpus: Sequence[tuple[str, str, int]]) -> str:
    return json.dumps([[str(u), str(m), int(t)] for u, m, t in gpus], separators=(",", ":"))


_MONEY = {"gpu_price_per_hour": to_price}
NODE = Shape(NodeRecord, {**_MONEY, "gpus": gpus_from_json, "gpu_count": int, "gpu_total_mib": int})
PERIOD = Shape(NodePeriod, {**_MONEY, "gpu_count": int, "gpu_total_mib": int})

SELECT_NODE = f"SELECT {NODE.columns} FROM nodes WHERE name = ?"
SELECT_NODES = f"SELECT {NODE.columns} FROM nodes ORDER BY name"
INSERT_NODE = (
    "INSERT INTO nodes (name, instance_type, capacity_type, zone, nodepool, gpu_count,"
    " gpu_total_mib, gpus, gpu_price_per_hour, first_seen, last_seen, gone_at, gone_reason)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, '')"
)
UPDATE_NODE = (
    "UPDATE nodes SET instance_type = ?, capacity_type = ?, zone = ?, nodepool = ?,"
    " gpu_count = ?, gpu_total_mib = ?, gpus = ?, gpu_price_per_hour = ?, last_seen = ?,"
    " gone_at = NULL, gone_reason = '' WHERE name = ?"
)
NODE_GONE = (
    "UPDATE nodes SET gone_at = ?, gone_reason = ?, last_seen = ?"
    " WHERE name = ? AND gone_at IS NULL"
)
CLOSE_PERIOD = "UPDATE node_periods SET until = ? WHERE node = ? AND until IS NULL RETURNING id"
OPEN_PERIOD = (
    "INSERT INTO node_periods (node, instance_type, capacity_type, gpu_count, gpu_total_mib,"
    " gpu_price_per_hour, since, until) VALUES (?, ?, ?, ?, ?, ?, ?, NULL) RETURNING id"
)
# every column chargeback reads from a period, with its id: what the chain attests
PERIOD_FIELDS = (
    "id", "node", "instance_type", "capacity_type", "gpu_count", "gpu_total_mib",
    "gpu_price_per_hour", "since", "until",
)  # fmt: skip
ALL_PERIODS = f"SELECT {', '.join(PERIOD_FIELDS)} FROM node_periods ORDER BY id"
PERIODS_IN_WINDOW = (
    f"SELECT {PERIOD.columns} FROM node_periods WHERE since < ? AND (until IS NULL OR until > ?)"
    " ORDER BY node, since"
)


def upsert(
    tx: Tx,
    node: NodeRef,
    gpus: Sequence[tuple[str, str, int]],
    gpu_price_per_hour: Decimal | None,
    at: float,
) -> None:
    """Insert or refresh the node; open a new price period when what it costs changed."""
    count, total = len(gpus), sum(int(g[2]) for g in gpus)
    shape: tuple[Any, ...] = (
        node.instance_type,
        node.capacity_type,
        node.zone,
        node.nodepool,
        count,
        total,
        gpus_json(gpus),
        tx.dialect.money(gpu_price_per_hour),
    )
    old = fetch_one(tx.execute(SELECT_NODE, (node.name,)), NODE)
    if old is None:
        tx.execute(INSERT_NODE, (node.name, *shape, at, at))
        changed = True
    else:
        changed = (
            old.gone_at is not None
            or old.gpu_count != count
            or old.gpu_total_mib != total
            or old.gpu_price_per_hour != gpu_price_per_hour
            or old.capacity_type != node.capacity_type
            or old.instance_type != node.instance_type
        )
        tx.execute(UPDATE_NODE, (*shape, max(at, old.last_seen), node.name))
    if changed:
        _close(tx, node.name, at)
        price = tx.dialect.money(gpu_price_per_hour)
        values = (node.name, node.instance_type, node.capacity_type, count, total, price, at)
        (period_id,) = tx.execute(OPEN_PERIOD, values).fetchone()
        tx.append_event(
            at,
            EventKind.NODE_PERIOD,
            period_payload(int(period_id), *values[:5], gpu_price_per_hour, at),
            node=node.name,
        )


def gone(tx: Tx, name: str, at: float, reason: str) -> None:
    tx.execute(NODE_GONE, (at, reason, at, name))
    _close(tx, name, at)


def _close(tx: Tx, name: str, at: float) -> None:
    """Close the node's open period, in the chain too (its ``until`` is billed)."""
    closed = sorted(int(i) for (i,) in tx.execute(CLOSE_PERIOD, (at, name)).fetchall())
    if closed:
        payload = {"period_ids": closed, "until": repr(float(at))}
        tx.append_event(at, EventKind.NODE_PERIOD_CLOSED, payload, node=name)


def period_payload(
    period_id: int,
    node: str,
    instance_type: str,
    capacity_type: str,
    gpu_count: int,
    gpu_total_mib: int,
    price: Decimal | None,
    since: float,
    until: float | None = None,
    attested: bool = False,
) -> dict[str, Any]:
    """A period as the chain records it (``replay.py`` compares the table against it)."""
    return {
        "period_id": period_id,
        "node": node,
        "instance_type": instance_type,
        "capacity_type": capacity_type,
        "gpu_count": gpu_count,
        "gpu_total_mib": gpu_total_mib,
        "gpu_price_per_hour": None if price is None else str(price),
        "since": repr(float(since)),
        "until": None if until is None else repr(float(until)),
        **({"attested": True} if attested else {}),
    }


def attest_existing(tx: Tx, at: float) -> None:
    """Migration 3: periods written before they were chained enter the chain as they are
    now, marked ``attested`` (the chain vouches for them from this moment on)."""
    for row in tx.execute(ALL_PERIODS).fetchall():
        pid, node, itype, ctype, count, total, price, since, until = row
        payload = period_payload(
            int(pid), node, itype, ctype, int(count), int(total), to_price(price), since,
            until, attested=True,
        )  # fmt: skip
        tx.append_event(at, EventKind.NODE_PERIOD, payload, node=node)
