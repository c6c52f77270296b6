"""The ``allocations`` table: one row per (pod, GPU) grant, read back as ``Allocation``.

``ALLOCATION`` maps a row to the one allocation shape (``extender.core.allocation``)
by column name; everything that reads allocations (the scheduling path's rebuild,
the audit API, chargeback, the CLI export) selects ``ALLOCATION.columns``. The writes
here run inside a ``Tx``: a decision's rows, status transitions, and the usage
rollup folded from agent samples.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

import msgspec

from extender.core.allocation import (
    Allocation,
    AlreadyAllocated,
    Decision,
    EventKind,
    GpuGrant,
    NodeRef,
    Observation,
    PodRef,
    Sharing,
    Status,
)
from extender.ledger import capacity
from extender.ledger.dialect import to_price
from extender.ledger.named import Shape, fetch_all
from extender.ledger.records import AllocationFilter
from extender.ledger.rollup import Rollup, fold
from extender.ledger.schema import ACTIVE_SQL
from extender.ledger.trail import Tx


def allocation(
    id: int,
    pod_uid: str,
    namespace: str,
    pod_name: str,
    owner_kind: str,
    owner_name: str,
    labels: str,
    node: str,
    instance_type: str,
    capacity_type: str,
    zone: str,
    nodepool: str,
    gpu_uuid: str,
    gpu_index: int,
    gpu_model: str,
    memory_mib: int,
    gpu_total_mib: int,
    sharing: str,
    mig_profile: str,
    claim: str,
    dra_device: str,
    price_per_hour: object,
    policy: str,
    status: str,
    decided_at: float,
    bound_at: float | None,
    started_at: float | None,
    ended_at: float | None,
    end_reason: str,
    obs_count: int,
    obs_peak_mib: int,
    obs_mean_mib: float,
    obs_mean_sm: float | None,
) -> Allocation:
    """One row, its parameters named for the columns they read.

    Built positionally and with enum members looked up in a dict: chargeback builds one
    per row of a month (a million), and keyword calls and ``Enum(value)`` double that.
    """
    return Allocation(
        int(id),
        PodRef(pod_uid, namespace, pod_name, owner_kind, owner_name, _labels(labels)),
        NodeRef(node, instance_type, capacity_type, zone, nodepool),
        GpuGrant(
            gpu_uuid,
            int(gpu_index),
            gpu_model,
            int(memory_mib),
            int(gpu_total_mib),
            _SHARING[sharing],
            to_price(price_per_hour),
            mig_profile,
            claim,
            dra_device,
        ),
        _STATUS[status],
        decided_at,
        bound_at,
        started_at,
        ended_at,
        end_reason,
        policy,
        int(obs_count),
        int(obs_peak_mib),
        float(obs_mean_mib),
        obs_mean_sm,
    )


_labels = msgspec.json.Decoder(dict[str, str]).decode  # 4x json.loads on label maps
_SHARING = {s.value: s for s in Sharing}
_STATUS = {s.value: s for s in Status}


ALLOCATION = Shape(allocation)


def insert_values(
    d: Decision, g: GpuGrant, money: Callable[[Decimal | None], Any]
) -> dict[str, Any]:
    """The columns a new RESERVED row is written with (the rest take their defaults)."""
    p, n = d.pod, d.node
    return {
        "pod_uid": p.uid,
        "namespace": p.namespace,
        "pod_name": p.name,
        "owner_kind": p.owner_kind,
        "owner_name": p.owner_name,
        "labels": labels_json(p.labels),
        "node": n.name,
        "instance_type": n.instance_type,
        "capacity_type": n.capacity_type,
        "zone": n.zone,
        "nodepool": n.nodepool,
        "gpu_uuid": g.gpu_uuid,
        "gpu_index": g.gpu_index,
        "gpu_model": g.model,
        "memory_mib": g.memory_mib,
        "gpu_total_mib": g.gpu_total_mib,
        "sharing": g.sharing.value,
        "mig_profile": g.mig_profile,
        "claim": g.claim,
        "dra_device": g.dra_device,
        "price_per_hour": money(g.price_per_hour),
        "policy": d.policy,
        "status": Status.RESERVED.value,
        "decided_at": d.decided_at,
    }


# the order of INSERT_ALLOCATION_BULK's raw rows (bench/ledger_bench.py builds them)
INSERT_COLUMNS = (
    "pod_uid", "namespace", "pod_name", "owner_kind", "owner_name", "labels", "node",
    "instance_type", "capacity_type", "zone", "nodepool", "gpu_uuid", "gpu_index", "gpu_model",
    "memory_mib", "gpu_total_mib", "sharing", "mig_profile", "claim", "dra_device",
    "price_per_hour", "policy", "status", "decided_at",
)  # fmt: skip
INSERT_ALLOCATION_BULK = (
    f"INSERT INTO allocations ({', '.join(INSERT_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(INSERT_COLUMNS))})"
)
INSERT_ALLOCATION = INSERT_ALLOCATION_BULK + " RETURNING id"

SELECT = f"SELECT {ALLOCATION.columns} FROM allocations"
SELECT_ACTIVE = f"{SELECT} WHERE status IN {ACTIVE_SQL} ORDER BY id"
SELECT_FOR_POD = f"{SELECT} WHERE pod_uid = ? ORDER BY id DESC"
SELECT_ONE = f"{SELECT} WHERE id = ?"
ALL_ROWS = f"{SELECT} ORDER BY id"
CHARGEABLE = (
    f"{SELECT} WHERE status <> 'failed' AND decided_at < ? AND (ended_at IS NULL OR ended_at > ?)"
)
ACTIVE_FOR_POD = (
    f"SELECT node FROM allocations WHERE pod_uid = ? AND status IN {ACTIVE_SQL} LIMIT 1"
)

# status transitions: each returns the rows it moved, for one event per (pod, node)
CHANGED = " RETURNING id, pod_uid, node"
MARK_BOUND = (
    "UPDATE allocations SET status = 'bound', bound_at = ?"
    " WHERE pod_uid = ? AND status = 'reserved'" + CHANGED
)
FAIL_BIND = (
    "UPDATE allocations SET status = 'failed', ended_at = ?, end_reason = ?"
    " WHERE pod_uid = ? AND status = 'reserved'" + CHANGED
)
MARK_STARTED = (
    "UPDATE allocations SET status = 'running', started_at = COALESCE(started_at, ?),"
    " bound_at = COALESCE(bound_at, ?)"
    " WHERE pod_uid = ? AND status IN ('reserved', 'bound')" + CHANGED
)
RELEASE_POD = (
    "UPDATE allocations SET status = 'ended', ended_at = ?, end_reason = ?"
    f" WHERE pod_uid = ? AND status IN {ACTIVE_SQL}" + CHANGED
)
RELEASE_NODE = (
    "UPDATE allocations SET status = 'ended', ended_at = ?, end_reason = ?"
    f" WHERE node = ? AND status IN {ACTIVE_SQL}" + CHANGED
)


class Changed(NamedTuple):
    id: int
    pod_uid: str
    node: str


CHANGED_ROW = Shape(Changed)


class Folding(NamedTuple):
    """An active row's usage rollup, with what folding a new sample needs beside it."""

    id: int
    since: float  # the allocation's start: started, else bound, else decided
    rollup: Rollup


def folding(
    id: int,
    since: float,
    obs_count: int,
    obs_peak_mib: int,
    obs_mean_mib: float,
    obs_weight_s: float,
    obs_mean_sm: float | None,
    obs_sm_weight_s: float,
    obs_last_at: float | None,
    obs_last_mib: int,
) -> Folding:
    rollup = Rollup(
        count=int(obs_count),
        peak_mib=int(obs_peak_mib),
        mean_mib=float(obs_mean_mib),
        weight_s=float(obs_weight_s),
        mean_sm=obs_mean_sm,
        sm_weight_s=float(obs_sm_weight_s),
        last_at=obs_last_at,
        last_mib=int(obs_last_mib),
    )
    return Folding(int(id), float(since), rollup)


FOLDING = Shape(folding)
SELECT_ROLLUP = (
    "SELECT id, COALESCE(started_at, bound_at, decided_at) AS since, obs_count, obs_peak_mib,"
    " obs_mean_mib, obs_weight_s, obs_mean_sm, obs_sm_weight_s, obs_last_at, obs_last_mib"
    f" FROM allocations WHERE pod_uid = ? AND gpu_uuid = ? AND status IN {ACTIVE_SQL}"
)
UPDATE_ROLLUP = (
    "UPDATE allocations SET obs_count = ?, obs_peak_mib = ?, obs_mean_mib = ?, obs_weight_s = ?,"
    " obs_mean_sm = ?, obs_sm_weight_s = ?, obs_last_at = ?, obs_last_mib = ? WHERE id = ?"
)


def labels_json(labels: dict[str, str]) -> str:
    return json.dumps(labels, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def holder(tx: Tx, pod_uid: str) -> str | None:
    """The node of the pod's active allocation, if it has one."""
    row = tx.execute(ACTIVE_FOR_POD, (pod_uid,)).fetchone()
    return None if row is None else str(row[0])


def decide(tx: Tx, d: Decision) -> list[int]:
    """A decision's rows and its event (their ids); refused, with nothing written, if
    the pod already holds GPUs (``AlreadyAllocated``) or a GPU would be over its memory
    (``CapacityExceeded``)."""
    held = holder(tx, d.pod.uid)
    if held is not None:
        raise AlreadyAllocated(d.pod.uid, held)
    capacity.check(tx, d)
    ids = insert_decision(tx, d)
    gpus = ",".join(g.gpu_uuid for g in d.grants)
    payload = decision_payload(d, ids)
    tx.append_event(d.decided_at, EventKind.DECISION, payload, d.pod.uid, d.node.name, gpus)
    return ids


def insert_decision(tx: Tx, d: Decision) -> list[int]:
    """One RESERVED row per grant; their ids, in grant order."""
    ids = []
    for g in d.grants:
        values = insert_values(d, g, tx.dialect.money)
        (new_id,) = tx.execute(INSERT_ALLOCATION, [values[c] for c in INSERT_COLUMNS]).fetchone()
        ids.append(int(new_id))
    return ids


def transition(
    tx: Tx,
    statement: str,
    params: Sequence[Any],
    kind: EventKind,
    at: float,
    extra: dict[str, Any],
) -> int:
    """Run one status UPDATE … RETURNING and append one event per (pod, node) it moved."""
    changed = fetch_all(tx.execute(statement, params), CHANGED_ROW)
    by_pod: dict[tuple[str, str], list[int]] = {}
    for c in changed:
        by_pod.setdefault((c.pod_uid, c.node), []).append(int(c.id))
    for (uid, node), ids in sorted(by_pod.items()):
        tx.append_event(at, kind, {"allocation_ids": sorted(ids), **extra}, uid, node)
    return len(changed)


def fold_samples(tx: Tx, observations: Sequence[Observation], at: float, max_gap: float) -> None:
    """Fold each sample into the rollup of the active row of its (pod, GPU)."""
    for o in observations:
        for row in fetch_all(tx.execute(SELECT_ROLLUP, (o.pod_uid, o.gpu_uuid)), FOLDING):
            new = fold(row.rollup, o.used_mib, o.sm_util, at, row.since, max_gap)
            tx.execute(
                UPDATE_ROLLUP,
                (
                    new.count,
                    new.peak_mib,
                    new.mean_mib,
                    new.weight_s,
                    new.mean_sm,
                    new.sm_weight_s,
                    new.last_at,
                    new.last_mib,
                    row.id,
                ),
            )


def where(f: AllocationFilter, after_id: int) -> tuple[str, list[Any]]:
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


def decision_payload(d: Decision, ids: list[int]) -> dict[str, Any]:
    """Everything the decision said, so the trail alone can rebuild the allocation rows."""
    return {
        "allocation_ids": ids,
        "decided_at": repr(d.decided_at),
        "policy": d.policy,
        "pod": {
            "uid": d.pod.uid,
            "namespace": d.pod.namespace,
            "name": d.pod.name,
            "owner_kind": d.pod.owner_kind,
            "owner_name": d.pod.owner_name,
            "labels": d.pod.labels,
        },
        "node": {
            "name": d.node.name,
            "instance_type": d.node.instance_type,
            "capacity_type": d.node.capacity_type,
            "zone": d.node.zone,
            "nodepool": d.node.nodepool,
        },
        "grants": [
            {
                "gpu_uuid": g.gpu_uuid,
                "gpu_index": g.gpu_index,
                "model": g.model,
                "memory_mib": g.memory_mib,
                "gpu_total_mib": g.gpu_total_mib,
                "sharing": g.sharing.value,
                "price_per_hour": None if g.price_per_hour is None else str(g.price_per_hour),
                "mig_profile": g.mig_profile,
                "claim": g.claim,
                "dra_device": g.dra_device,
            }
            for g in d.grants
        ],
    }
