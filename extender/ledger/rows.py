"""SQL both dialects share, and the mapping between rows and plain data.

Statements are written once with ``?`` placeholders; the PostgreSQL dialect rewrites
them to ``%s``. Nothing here touches a connection.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from extender.core.allocation import Allocation, GpuGrant, NodeRef, PodRef, Sharing, Status
from extender.ledger.chargeback import ChargeRow
from extender.ledger.records import (
    AllocationFilter,
    DiscrepancyRecord,
    EventRecord,
    NodePeriod,
    NodeRecord,
)
from extender.ledger.rollup import Rollup
from extender.ledger.schema import ACTIVE_SQL

ALLOC_COLS = (
    "id, pod_uid, namespace, pod_name, owner_kind, owner_name, labels, node, instance_type,"
    " capacity_type, zone, nodepool, gpu_uuid, gpu_index, gpu_model, memory_mib, gpu_total_mib,"
    " sharing, mig_profile, claim, dra_device, price_per_hour, policy, status, decided_at,"
    " bound_at, started_at, ended_at, end_reason, obs_count, obs_peak_mib, obs_mean_mib,"
    " obs_mean_sm"
)

INSERT_ALLOCATION = (
    "INSERT INTO allocations (pod_uid, namespace, pod_name, owner_kind, owner_name, labels, node,"
    " instance_type, capacity_type, zone, nodepool, gpu_uuid, gpu_index, gpu_model, memory_mib,"
    " gpu_total_mib, sharing, mig_profile, claim, dra_device, price_per_hour, policy, status,"
    " decided_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " RETURNING id"
)
INSERT_ALLOCATION_BULK = INSERT_ALLOCATION.removesuffix(" RETURNING id")

ACTIVE_FOR_POD = (
    f"SELECT node FROM allocations WHERE pod_uid = ? AND status IN {ACTIVE_SQL} LIMIT 1"
)
SELECT_ACTIVE = f"SELECT {ALLOC_COLS} FROM allocations WHERE status IN {ACTIVE_SQL} ORDER BY id"
SELECT_FOR_POD = f"SELECT {ALLOC_COLS} FROM allocations WHERE pod_uid = ? ORDER BY id DESC"
SELECT_ONE = f"SELECT {ALLOC_COLS} FROM allocations WHERE id = ?"

MARK_BOUND = (
    "UPDATE allocations SET status = 'bound', bound_at = ?"
    " WHERE pod_uid = ? AND status = 'reserved' RETURNING id, node"
)
FAIL_BIND = (
    "UPDATE allocations SET status = 'failed', ended_at = ?, end_reason = ?"
    " WHERE pod_uid = ? AND status = 'reserved' RETURNING id, node"
)
MARK_STARTED = (
    "UPDATE allocations SET status = 'running', started_at = COALESCE(started_at, ?),"
    " bound_at = COALESCE(bound_at, ?)"
    " WHERE pod_uid = ? AND status IN ('reserved', 'bound') RETURNING id, node"
)
RELEASE_POD = (
    "UPDATE allocations SET status = 'ended', ended_at = ?, end_reason = ?"
    f" WHERE pod_uid = ? AND status IN {ACTIVE_SQL} RETURNING id, pod_uid, node"
)
RELEASE_NODE = (
    "UPDATE allocations SET status = 'ended', ended_at = ?, end_reason = ?"
    f" WHERE node = ? AND status IN {ACTIVE_SQL} RETURNING id, pod_uid, node"
)

SELECT_ROLLUP = (
    "SELECT id, obs_count, obs_peak_mib, obs_mean_mib, obs_weight_s, obs_mean_sm,"
    " obs_sm_weight_s, obs_last_at, obs_last_mib, COALESCE(started_at, bound_at, decided_at)"
    f" FROM allocations WHERE pod_uid = ? AND gpu_uuid = ? AND status IN {ACTIVE_SQL}"
)
UPDATE_ROLLUP = (
    "UPDATE allocations SET obs_count = ?, obs_peak_mib = ?, obs_mean_mib = ?, obs_weight_s = ?,"
    " obs_mean_sm = ?, obs_sm_weight_s = ?, obs_last_at = ?, obs_last_mib = ? WHERE id = ?"
)

HEAD = "SELECT seq, hash FROM chain_head WHERE id = 1"
SET_HEAD = "UPDATE chain_head SET seq = ?, hash = ? WHERE id = 1"
INSERT_HEAD = "INSERT INTO chain_head (id, seq, hash) VALUES (1, 0, ?)"
INSERT_EVENT = (
    "INSERT INTO events (seq, at, kind, pod_uid, node, gpu_uuid, payload, prev_hash, hash)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
EVENT_COLS = "seq, at, kind, pod_uid, node, gpu_uuid, payload, prev_hash, hash"
SELECT_EVENTS = f"SELECT {EVENT_COLS} FROM events WHERE seq > ? ORDER BY seq LIMIT ?"
SELECT_ALL_EVENTS = f"SELECT {EVENT_COLS} FROM events ORDER BY seq"

NODE_COLS = (
    "name, instance_type, capacity_type, zone, nodepool, gpu_count, gpu_total_mib, gpus,"
    " gpu_price_per_hour, first_seen, last_seen, gone_at, gone_reason"
)
SELECT_NODE = f"SELECT {NODE_COLS} FROM nodes WHERE name = ?"
SELECT_NODES = f"SELECT {NODE_COLS} FROM nodes ORDER BY name"
INSERT_NODE = f"INSERT INTO nodes ({NODE_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, '')"
UPDATE_NODE = (
    "UPDATE nodes SET instance_type = ?, capacity_type = ?, zone = ?, nodepool = ?,"
    " gpu_count = ?, gpu_total_mib = ?, gpus = ?, gpu_price_per_hour = ?, last_seen = ?,"
    " gone_at = NULL, gone_reason = '' WHERE name = ?"
)
NODE_GONE = (
    "UPDATE nodes SET gone_at = ?, gone_reason = ?, last_seen = ?"
    " WHERE name = ? AND gone_at IS NULL"
)
CLOSE_PERIOD = "UPDATE node_periods SET until = ? WHERE node = ? AND until IS NULL"
OPEN_PERIOD = (
    "INSERT INTO node_periods (node, instance_type, capacity_type, gpu_count, gpu_total_mib,"
    " gpu_price_per_hour, since, until) VALUES (?, ?, ?, ?, ?, ?, ?, NULL)"
)
PERIODS_IN_WINDOW = (
    "SELECT node, instance_type, capacity_type, gpu_count, gpu_total_mib, gpu_price_per_hour,"
    " since, until FROM node_periods WHERE since < ? AND (until IS NULL OR until > ?)"
    " ORDER BY node, since"
)

CHARGE_COLS = (
    "id, pod_uid, namespace, pod_name, labels, node, capacity_type, gpu_uuid, memory_mib,"
    " price_per_hour, decided_at, ended_at, status, obs_count, obs_mean_mib, obs_mean_sm"
)
CHARGE_ROWS = (
    f"SELECT {CHARGE_COLS} FROM allocations WHERE status <> 'failed'"
    " AND decided_at < ? AND (ended_at IS NULL OR ended_at > ?)"
)

DISC_COLS = (
    "id, kind, node, gpu_uuid, pod_uid, first_seen, last_seen, count, max_amount_mib,"
    " last_amount_mib, detail, closed_at"
)
OPEN_DISCREPANCY = (
    "SELECT id, last_seen FROM discrepancies WHERE kind = ? AND node = ? AND gpu_uuid = ?"
    " AND pod_uid = ? AND closed_at IS NULL"
)
BUMP_DISCREPANCY = (
    "UPDATE discrepancies SET last_seen = ?, count = count + 1, last_amount_mib = ?,"
    " max_amount_mib = CASE WHEN max_amount_mib < ? THEN ? ELSE max_amount_mib END, detail = ?"
    " WHERE id = ?"
)
CLOSE_DISCREPANCY = "UPDATE discrepancies SET closed_at = last_seen WHERE id = ?"
INSERT_DISCREPANCY = (
    "INSERT INTO discrepancies (kind, node, gpu_uuid, pod_uid, first_seen, last_seen, count,"
    " max_amount_mib, last_amount_mib, detail) VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?) RETURNING id"
)


def labels_json(labels: dict[str, str]) -> str:
    return json.dumps(labels, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def allocation_from_row(r: Sequence[Any]) -> Allocation:
    """Map one ``ALLOC_COLS`` row to an ``Allocation``."""
    pod = PodRef(
        uid=r[1],
        namespace=r[2],
        name=r[3],
        owner_kind=r[4],
        owner_name=r[5],
        labels=json.loads(r[6]),
    )
    node = NodeRef(name=r[7], instance_type=r[8], capacity_type=r[9], zone=r[10], nodepool=r[11])
    grant = GpuGrant(
        gpu_uuid=r[12],
        gpu_index=int(r[13]),
        model=r[14],
        memory_mib=int(r[15]),
        gpu_total_mib=int(r[16]),
        sharing=Sharing(r[17]),
        price_per_hour=to_decimal(r[21]),
        mig_profile=r[18],
        claim=r[19],
        dra_device=r[20],
    )
    return Allocation(
        id=int(r[0]),
        pod=pod,
        node=node,
        grant=grant,
        status=Status(r[23]),
        decided_at=r[24],
        bound_at=r[25],
        started_at=r[26],
        ended_at=r[27],
        end_reason=r[28],
        policy=r[22],
        obs_count=int(r[29]),
        obs_peak_mib=int(r[30]),
        obs_mean_mib=float(r[31]),
        obs_mean_sm=r[32],
    )


def to_decimal(v: object) -> Decimal:
    """TEXT (SQLite) or NUMERIC (PostgreSQL) money back to an exact Decimal."""
    return v if isinstance(v, Decimal) else Decimal(str(v))


def charge_row(r: Sequence[Any]) -> ChargeRow:
    return ChargeRow(
        int(r[0]),
        r[1],
        r[2],
        r[3],
        r[4],
        r[5],
        r[6],
        r[7],
        int(r[8]),
        to_decimal(r[9]),
        r[10],
        r[11],
        r[12],
        int(r[13]),
        float(r[14]),
        r[15],
    )


def rollup_from_row(r: Sequence[Any]) -> Rollup:
    return Rollup(
        count=int(r[1]),
        peak_mib=int(r[2]),
        mean_mib=float(r[3]),
        weight_s=float(r[4]),
        mean_sm=r[5],
        sm_weight_s=float(r[6]),
        last_at=r[7],
        last_mib=int(r[8]),
    )


def event_from_row(r: Sequence[Any]) -> EventRecord:
    return EventRecord(int(r[0]), float(r[1]), r[2], r[3], r[4], r[5], r[6], r[7], r[8])


def node_from_row(r: Sequence[Any]) -> NodeRecord:
    gpus = [(str(u), str(m), int(t)) for u, m, t in json.loads(r[7])]
    return NodeRecord(
        r[0],
        r[1],
        r[2],
        r[3],
        r[4],
        int(r[5]),
        int(r[6]),
        to_decimal(r[8]),
        gpus,
        r[9],
        r[10],
        r[11],
        r[12],
    )


def period_from_row(r: Sequence[Any]) -> NodePeriod:
    return NodePeriod(r[0], r[1], r[2], int(r[3]), int(r[4]), to_decimal(r[5]), r[6], r[7])


def discrepancy_from_row(r: Sequence[Any]) -> DiscrepancyRecord:
    return DiscrepancyRecord(
        int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], int(r[7]), int(r[8]), int(r[9]), r[10], r[11]
    )


def allocation_where(f: AllocationFilter, after_id: int) -> tuple[str, list[Any]]:
    """WHERE clause + params for ``list_allocations`` (keyset pagination on id)."""
    clauses: list[str] = ["id > ?"]
    params: list[Any] = [after_id]
    if f.namespace is not None:
        clauses.append("namespace = ?")
        params.append(f.namespace)
    if f.node is not None:
        clauses.append("node = ?")
        params.append(f.node)
    if f.pod is not None:
        clauses.append("(pod_name = ? OR pod_uid = ?)")
        params += [f.pod, f.pod]
    if f.active is not None:
        clauses.append(f"status {'IN' if f.active else 'NOT IN'} {ACTIVE_SQL}")
    if f.end is not None:
        clauses.append("decided_at < ?")
        params.append(f.end)
    if f.start is not None:
        clauses.append("(ended_at IS NULL OR ended_at > ?)")
        params.append(f.start)
    return " AND ".join(clauses), params
