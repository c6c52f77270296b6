"""The billing rows against the chain: every column chargeback reads, replayed (pure).

The hash chain proves the events were not edited; this proves the tables chargeback
reads still say what the events say. Each allocation's billed columns are fixed by its
``decision`` event (pod, namespace, labels, node, instance and capacity type, GPU,
memory, sharing, MIG profile, claim, price, policy, decided_at) and moved only by the
transition events naming its id (``bound``, ``started``, ``released``, ``bind-failed``:
status, bound_at, started_at, ended_at, end_reason), exactly as the ledger's UPDATEs
move them. Each node price period is fixed by its ``node-period`` event and closed by
``node-period-closed``. Replaying the trail gives what every row must hold; a row that
differs is named with its column, a row the trail knows but the table lost is named as
deleted, and a row the trail never wrote as unchained.

Not covered: the usage rollup (``obs_*``: rewritten on every agent report, a signal
beside the bill that nobody pays by) and the ``nodes`` table (current facts; what is
billed is in the periods). Like the chain itself this is tamper-*evidence*: whoever can
rewrite the events, the head and the tables together can forge a consistent ledger.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from extender.core.allocation import Allocation, EventKind
from extender.ledger.records import EventRecord

# the decision's columns, in the order they are digested
STATIC = (
    "pod_uid", "namespace", "pod_name", "owner_kind", "owner_name", "labels", "node",
    "instance_type", "capacity_type", "zone", "nodepool", "gpu_uuid", "gpu_index", "gpu_model",
    "memory_mib", "gpu_total_mib", "sharing", "mig_profile", "claim", "dra_device",
    "price_per_hour", "policy", "decided_at",
)  # fmt: skip
PERIOD = (
    "node", "instance_type", "capacity_type", "gpu_count", "gpu_total_mib",
    "gpu_price_per_hour", "since", "until",
)  # fmt: skip


@dataclass
class _Row:
    """What one allocation row must hold: its decision (digest and the event's seq, to
    name the column when it differs), and the columns transitions move."""

    seq: int
    digest: bytes
    status: str = "reserved"
    bound_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    end_reason: str = ""


@dataclass
class Replay:
    """Expected rows, built by feeding every event in order (``feed``)."""

    rows: dict[int, _Row] = field(default_factory=dict)
    periods: dict[int, dict[str, Any]] = field(default_factory=dict)
    decisions: dict[int, dict[str, Any]] = field(default_factory=dict)  # by seq, on demand

    def feed(self, e: EventRecord) -> None:
        kind = e.kind
        if kind == EventKind.DECISION:
            for i, values in decision_rows(json.loads(e.payload), e.pod_uid):
                self.rows[i] = _Row(e.seq, digest(values))
        elif kind in _MOVES:
            payload = json.loads(e.payload)
            for i in payload.get("allocation_ids", ()):
                row = self.rows.get(int(i))
                if row is not None:
                    _MOVES[kind](row, e.at, payload)
        elif kind == EventKind.NODE_PERIOD:
            p = json.loads(e.payload)
            self.periods[int(p["period_id"])] = _period(p)
        elif kind == EventKind.NODE_PERIOD_CLOSED:
            p = json.loads(e.payload)
            for i in p["period_ids"]:
                if int(i) in self.periods:
                    self.periods[int(i)]["until"] = float(p["until"])


def decision_rows(payload: dict[str, Any], pod_uid: str) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """(allocation id, its static columns) for each grant of a decision event."""
    pod, node = payload["pod"], payload["node"]
    for i, g in zip(payload["allocation_ids"], payload["grants"], strict=True):
        price = g["price_per_hour"]
        yield int(i), (
            pod.get("uid", pod_uid), pod["namespace"], pod["name"], pod["owner_kind"],
            pod["owner_name"], _labels(pod["labels"]), node["name"], node["instance_type"],
            node["capacity_type"], node["zone"], node["nodepool"], g["gpu_uuid"],
            int(g["gpu_index"]), g["model"], int(g["memory_mib"]), int(g["gpu_total_mib"]),
            g["sharing"], g["mig_profile"], g["claim"], g["dra_device"],
            None if price in (None, "None") else Decimal(price), payload["policy"],
            float(payload["decided_at"]),
        )  # fmt: skip


def row_static(a: Allocation) -> tuple[Any, ...]:
    """The same columns read from a table row."""
    p, n, g = a.pod, a.node, a.grant
    return (
        p.uid, p.namespace, p.name, p.owner_kind, p.owner_name, _labels(p.labels), n.name,
        n.instance_type, n.capacity_type, n.zone, n.nodepool, g.gpu_uuid, g.gpu_index,
        g.model, g.memory_mib, g.gpu_total_mib, g.sharing.value, g.mig_profile, g.claim,
        g.dra_device, g.price_per_hour, a.policy, a.decided_at,
    )  # fmt: skip


def digest(values: tuple[Any, ...]) -> bytes:
    """SHA-256 of the values, money by value (``4.0`` and ``4.00`` are one price)."""
    text = json.dumps([_canon(v) for v in values], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).digest()


def check_allocations(
    replay: Replay, rows: Iterable[Allocation], decision: Any
) -> tuple[int, str] | None:
    """The first row that differs from the trail: (allocation id, why); ``decision(seq)``
    reads a decision event back to name the edited column."""
    seen: set[int] = set()
    for a in rows:
        seen.add(a.id)
        want = replay.rows.get(a.id)
        if want is None:
            return a.id, f"allocation {a.id} is not in the trail (a row written outside it)"
        if digest(row_static(a)) != want.digest:
            return a.id, f"allocation {a.id}: {_edited_static(a, decision(want.seq))} was edited"
        moved = (a.status.value, a.bound_at, a.started_at, a.ended_at, a.end_reason)
        expected = (want.status, want.bound_at, want.started_at, want.ended_at, want.end_reason)
        for name, got, exp in zip(_MOVED, moved, expected, strict=True):
            if got != exp:
                return a.id, f"allocation {a.id}: {name} was edited ({got!r}, trail: {exp!r})"
    deleted = sorted(set(replay.rows) - seen)
    return (deleted[0], f"allocation {deleted[0]} was deleted") if deleted else None


def check_periods(replay: Replay, rows: Iterable[tuple[Any, ...]]) -> tuple[int, str] | None:
    """The first node price period that differs from the trail, or was deleted."""
    seen: set[int] = set()
    for raw in rows:
        pid, values = int(raw[0]), _period(dict(zip(PERIOD, raw[1:], strict=True)))
        seen.add(pid)
        want = replay.periods.get(pid)
        if want is None:
            return pid, f"node period {pid} is not in the trail"
        for name in PERIOD:
            if values[name] != want[name]:
                return pid, f"node period {pid}: {name} was edited"
    deleted = sorted(set(replay.periods) - seen)
    return (deleted[0], f"node period {deleted[0]} was deleted") if deleted else None


def _edited_static(a: Allocation, event: EventRecord | None) -> str:
    if event is None:
        return "its decision"
    payload = json.loads(event.payload)
    got = row_static(a)
    for i, values in decision_rows(payload, event.pod_uid):
        if i == a.id:
            diff = [
                n for n, x, y in zip(STATIC, got, values, strict=True) if _canon(x) != _canon(y)
            ]
            return ", ".join(diff) or "its decision"
    return "its decision"


def _bound(row: _Row, at: float, payload: dict[str, Any]) -> None:
    row.status, row.bound_at = "bound", at


def _started(row: _Row, at: float, payload: dict[str, Any]) -> None:
    row.status = "running"
    row.started_at = row.started_at if row.started_at is not None else at
    row.bound_at = row.bound_at if row.bound_at is not None else at


def _released(row: _Row, at: float, payload: dict[str, Any]) -> None:
    row.status, row.ended_at, row.end_reason = "ended", at, str(payload.get("reason", ""))


def _failed(row: _Row, at: float, payload: dict[str, Any]) -> None:
    row.status, row.ended_at, row.end_reason = "failed", at, str(payload.get("error", ""))


_MOVES = {
    EventKind.BOUND.value: _bound,
    EventKind.STARTED.value: _started,
    EventKind.RELEASED.value: _released,
    EventKind.BIND_FAILED.value: _failed,
}
_MOVED = ("status", "bound_at", "started_at", "ended_at", "end_reason")


def _period(p: dict[str, Any]) -> dict[str, Any]:
    price = p["gpu_price_per_hour"]
    return {
        "node": p["node"],
        "instance_type": p["instance_type"],
        "capacity_type": p["capacity_type"],
        "gpu_count": int(p["gpu_count"]),
        "gpu_total_mib": int(p["gpu_total_mib"]),
        "gpu_price_per_hour": None if price is None else Decimal(str(price)),
        "since": float(p["since"]),
        "until": None if p["until"] is None else float(p["until"]),
    }


def _labels(labels: dict[str, str]) -> str:
    return json.dumps(labels, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _canon(v: Any) -> Any:
    if isinstance(v, Decimal):
        return str(v.normalize()) if v else "0"
    if isinstance(v, float):
        return repr(v)
    return v
