"""The audit API: read-only HTTP views of the ledger for people and FinOps tools.

``audit_router(get_ledger, clock)`` returns an ``APIRouter`` the extender app mounts.
Endpoints are plain ``def`` so FastAPI runs them in its thread pool (ledger calls
block). Every bad parameter answers 400 (or FastAPI's 422 for type errors) with a
``detail`` naming the parameter and why; an unreachable ledger answers 503.
Money is always a decimal string, never a JSON float.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Annotated, Literal, TypeVar

from fastapi import APIRouter, HTTPException, Path, Query, Response
from pydantic import BaseModel, Field

from extender.core.allocation import Allocation, LedgerUnavailable
from extender.core.received import Receipt
from extender.ledger import chargeback_report
from extender.ledger.base import Ledger
from extender.ledger.chargeback import parse_group_by
from extender.ledger.exports import report_csv, report_dict
from extender.ledger.records import AllocationFilter, DiscrepancyRecord, EventRecord
from extender.ledger.window import month_start, parse_timestamp
from extender.wire.clock import Clock

MAX_LIMIT = 1000
T = TypeVar("T")


class ReceivedOut(BaseModel):
    gpu_uuid: str
    memory_mib: int  # billed
    gpu_total_mib: int
    price_per_hour: str | None  # billed; null: unpriced
    devices: str  # kubelet's device ids (or the DRA device)
    at: float
    matches_grant: bool


def received_out(r: Receipt | None) -> ReceivedOut | None:
    if r is None:
        return None
    return ReceivedOut(
        gpu_uuid=r.gpu_uuid,
        memory_mib=r.memory_mib,
        gpu_total_mib=r.gpu_total_mib,
        price_per_hour=None if r.price_per_hour is None else str(r.price_per_hour),
        devices=r.devices,
        at=r.at,
        matches_grant=r.matches,
    )


class AllocationOut(BaseModel):
    id: int
    pod_uid: str
    namespace: str
    pod_name: str
    owner_kind: str
    owner_name: str
    labels: dict[str, str]
    node: str
    instance_type: str
    capacity_type: str
    zone: str
    nodepool: str
    gpu_uuid: str
    gpu_index: int
    gpu_model: str
    memory_mib: int
    gpu_total_mib: int
    sharing: str
    mig_profile: str
    claim: str
    dra_device: str
    price_per_hour: str | None  # null: unpriced (the node's type has no price)
    policy: str
    status: str
    decided_at: float
    bound_at: float | None
    started_at: float | None
    ended_at: float | None
    end_reason: str
    obs_count: int
    obs_peak_mib: int
    obs_mean_mib: float
    obs_mean_sm: float | None
    # what kubelet says the pod holds for this grant, and what it is billed; null until
    # the node's agent reported it (or where no agent reads pod-resources)
    received: ReceivedOut | None = None


class AllocationPage(BaseModel):
    items: list[AllocationOut]
    next_cursor: str | None


class EventPage(BaseModel):
    items: list[EventRecord]
    next_cursor: str | None


class DiscrepancyPage(BaseModel):
    items: list[DiscrepancyRecord]
    next_cursor: str | None


class GroupOut(BaseModel):
    key: str
    allocations: int
    gib_hours: str
    cost: str | None  # null: every grant in the group was unpriced
    mean_used_mib: float | None
    mean_sm_util: float | None
    unpriced_gib_hours: str


class NodeCostOut(BaseModel):
    node: str
    instance_type: str
    capacity_type: str
    gpu_hours: str
    cost: str | None  # null: unpriced
    charged: str
    idle: str | None
    oversubscribed: bool
    unpriced: bool


class ChargebackOut(BaseModel):
    from_: float = Field(alias="from")
    to: float
    group_by: str
    rounding: str
    groups: list[GroupOut]
    nodes: list[NodeCostOut]
    total_charged: str
    total_node_cost: str
    total_idle: str
    oversubscribed_nodes: list[str]
    unpriced_nodes: list[str]  # left out of the totals: their cost is unknown
    unpriced_gib_hours: str


def bad(param: str, why: str) -> HTTPException:
    return HTTPException(status_code=400, detail=f"parameter '{param}': {why}")


def parse_time(param: str, value: str | None) -> float | None:
    """RFC3339 (with an offset or Z), a date (UTC midnight) or Unix seconds; anything
    else is a 400."""
    if value is None or value == "":
        return None
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise bad(param, str(exc)) from None


def encode_cursor(kind: str, after: int) -> str:
    raw = json.dumps({"k": kind, "a": after}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str | None) -> int:
    """The position an opaque cursor stands for; a forged or foreign one is a 400."""
    if not cursor:
        return 0
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        after = data["a"]
        if data["k"] != kind or not isinstance(after, int) or after < 0:
            raise ValueError
        return after
    except (ValueError, KeyError, TypeError):
        raise bad("cursor", f"not a cursor of this listing: {cursor!r}") from None


def allocation_out(a: Allocation, receipt: Receipt | None = None) -> AllocationOut:
    g = a.grant
    return AllocationOut(
        id=a.id,
        pod_uid=a.pod.uid,
        namespace=a.pod.namespace,
        pod_name=a.pod.name,
        owner_kind=a.pod.owner_kind,
        owner_name=a.pod.owner_name,
        labels=a.pod.labels,
        node=a.node.name,
        instance_type=a.node.instance_type,
        capacity_type=a.node.capacity_type,
        zone=a.node.zone,
        nodepool=a.node.nodepool,
        gpu_uuid=g.gpu_uuid,
        gpu_index=g.gpu_index,
        gpu_model=g.model,
        memory_mib=g.memory_mib,
        gpu_total_mib=g.gpu_total_mib,
        sharing=g.sharing.value,
        mig_profile=g.mig_profile,
        claim=g.claim,
        dra_device=g.dra_device,
        price_per_hour=None if g.price_per_hour is None else str(g.price_per_hour),
        policy=a.policy,
        status=a.status.value,
        decided_at=a.decided_at,
        bound_at=a.bound_at,
        started_at=a.started_at,
        ended_at=a.ended_at,
        end_reason=a.end_reason,
        obs_count=a.obs_count,
        obs_peak_mib=a.obs_peak_mib,
        obs_mean_mib=a.obs_mean_mib,
        obs_mean_sm=a.obs_mean_sm,
        received=received_out(receipt),
    )


def _window(start: str | None, end: str | None) -> tuple[float | None, float | None]:
    lo, hi = parse_time("from", start), parse_time("to", end)
    if lo is not None and hi is not None and hi <= lo:
        raise bad("to", f"must be after 'from' ({end!r} <= {start!r})")
    return lo, hi


Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"page size, 1..{MAX_LIMIT}")]
WHEN = "RFC3339, a date (UTC midnight) or unix seconds"
Time = Annotated[str | None, Query(description=WHEN)]
FromTime = Annotated[str | None, Query(alias="from", description=WHEN)]


def audit_router(get_ledger: Callable[[], Ledger], clock: Clock) -> APIRouter:
    """Build the ``/v1`` audit routes over whatever ledger ``get_ledger`` returns now."""
    router = APIRouter(prefix="/v1", tags=["audit"])

    def ledger() -> Ledger:
        return get_ledger()

    @router.get("/allocations", response_model=AllocationPage)
    def list_allocations(
        namespace: str | None = None,
        node: str | None = None,
        pod: Annotated[str | None, Query(description="name or UID")] = None,
        active: bool | None = None,
        start: FromTime = None,
        to: Time = None,
        limit: Limit = 100,
        cursor: str | None = None,
    ) -> AllocationPage:
        lo, hi = _window(start, to)
        after = decode_cursor("alloc", cursor)
        flt = AllocationFilter(namespace, node, pod, active, lo, hi)
        rows = _call(lambda: ledger().list_allocations(flt, after, limit + 1))
        page = rows[:limit]
        nxt = encode_cursor("alloc", page[-1].id) if len(rows) > limit else None
        got = {
            r.allocation_id: r for r in _call(lambda: ledger().receipts_for([a.id for a in page]))
        }
        items = [allocation_out(a, got.get(a.id)) for a in page]
        return AllocationPage(items=items, next_cursor=nxt)

    @router.get(
        "/allocations/{allocation_id}",
        response_model=AllocationOut,
        responses={404: {"description": "no such allocation"}},
    )
    def get_allocation(
        allocation_id: Annotated[int, Path(ge=1, le=2**63 - 1, description="ledger row id")],
    ) -> AllocationOut:
        found = _call(lambda: ledger().get_allocation(allocation_id))
        if found is None:
            raise HTTPException(status_code=404, detail=f"allocation {allocation_id} not found")
        got = _call(lambda: ledger().receipts_for([allocation_id]))
        return allocation_out(found, got[0] if got else None)

    @router.get(
        "/chargeback", response_model=ChargebackOut, responses={200: {"content": {"text/csv": {}}}}
    )
    def chargeback(
        start: FromTime = None,
        to: Time = None,
        group_by: str = "namespace",
        format: Literal["json", "csv"] = "json",
    ) -> Response | ChargebackOut:
        lo, hi = _window(start, to)
        now = clock.now()
        hi = now if hi is None else hi
        lo = month_start(hi) if lo is None else lo
        if hi <= lo:
            raise bad("from", "must be before 'to'")
        try:
            grouping = parse_group_by(group_by)
        except ValueError as exc:
            raise bad("group_by", str(exc)) from None
        report = _call(lambda: chargeback_report(ledger(), lo, hi, grouping, now))
        if format == "csv":
            return Response(report_csv(report), media_type="text/csv")
        return ChargebackOut.model_validate(report_dict(report))

    @router.get("/discrepancies", response_model=DiscrepancyPage)
    def discrepancies(
        status: Literal["open", "all"] = "open", limit: Limit = 100, cursor: str | None = None
    ) -> DiscrepancyPage:
        after = decode_cursor("disc", cursor)
        rows = _call(
            lambda: ledger().list_discrepancies(status == "open", clock.now(), after, limit + 1)
        )
        page = rows[:limit]
        nxt = encode_cursor("disc", page[-1].id) if len(rows) > limit else None
        return DiscrepancyPage(items=list(page), next_cursor=nxt)

    @router.get("/events", response_model=EventPage)
    def events(limit: Limit = 100, cursor: str | None = None) -> EventPage:
        after = decode_cursor("event", cursor)
        rows = _call(lambda: ledger().list_events(after, limit + 1))
        page = rows[:limit]
        nxt = encode_cursor("event", page[-1].seq) if len(rows) > limit else None
        return EventPage(items=list(page), next_cursor=nxt)

    return router


def _call(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except LedgerUnavailable as exc:
        raise HTTPException(status_code=503, detail=f"ledger unavailable: {exc}") from exc
