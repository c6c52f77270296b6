"""The ``discrepancies`` table: overrun, leak, unaccounted, unacknowledged and mismatch
findings, deduplicated.

Agents report the same finding every few seconds while it lasts; one row per finding
(count, last and largest amount) keeps the table and the event trail bounded. A
finding unseen for ``DISCREPANCY_GAP_S`` is over: the next sighting closes the old
row and opens a new one, with a new event.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from extender.core.allocation import EventKind
from extender.ledger.named import Shape, fetch_one
from extender.ledger.records import DiscrepancyRecord
from extender.ledger.trail import Tx

DISCREPANCY_KINDS = (
    EventKind.OVERRUN,
    EventKind.LEAK,
    EventKind.UNACCOUNTED,
    EventKind.UNACKNOWLEDGED,
    EventKind.MISMATCH,
)
DISCREPANCY_GAP_S = 300.0  # unseen this long: the finding is over; a new one opens next time

DISCREPANCY = Shape(DiscrepancyRecord)


class OpenFinding(NamedTuple):
    id: int
    last_seen: float


OPEN_FINDING = Shape(OpenFinding, {"id": int, "last_seen": float})

OPEN_DISCREPANCY = (
    f"SELECT {OPEN_FINDING.columns} FROM discrepancies WHERE kind = ? AND node = ?"
    " AND gpu_uuid = ? AND pod_uid = ? AND closed_at IS NULL"
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


def record(
    tx: Tx,
    kind: EventKind,
    node: str,
    gpu_uuid: str,
    pod_uid: str,
    amount_mib: int,
    detail: str,
    at: float,
    gap_s: float,
) -> bool:
    """Bump the open finding, or open a new one (with an event); True when one opened."""
    if kind not in DISCREPANCY_KINDS:
        raise ValueError(f"not a discrepancy kind: {kind!r}")
    key = (kind.value, node, gpu_uuid, pod_uid)
    found = fetch_one(tx.execute(OPEN_DISCREPANCY, key), OPEN_FINDING)
    if found is not None and at - found.last_seen <= gap_s:
        tx.execute(
            BUMP_DISCREPANCY,
            (max(at, found.last_seen), amount_mib, amount_mib, amount_mib, detail, found.id),
        )
        return False
    if found is not None:
        tx.execute(CLOSE_DISCREPANCY, (found.id,))
    (new_id,) = tx.execute(
        INSERT_DISCREPANCY, (*key, at, at, amount_mib, amount_mib, detail)
    ).fetchone()
    tx.append_event(
        at,
        kind,
        {"discrepancy_id": int(new_id), "amount_mib": amount_mib, "detail": detail},
        pod_uid,
        node,
        gpu_uuid,
    )
    return True


def listing(open_only: bool, at: float, gap_s: float, after_id: int) -> tuple[str, list[Any]]:
    """Findings by id; "open" = not closed and seen within the persistence gap."""
    q = f"SELECT {DISCREPANCY.columns} FROM discrepancies WHERE id > ?"
    params: list[Any] = [after_id]
    if open_only:
        q += " AND closed_at IS NULL AND last_seen >= ?"
        params.append(at - gap_s)
    return q + " ORDER BY id LIMIT ?", params
