"""The audit API over real HTTP: uvicorn on 127.0.0.1 in a thread, httpx as client."""

from __future__ import annotations

import csv
import io
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from extender.core.allocation import EventKind
from extender.http.audit import audit_router
from extender.ledger.base import Ledger
from extender.wire.clock import ManualClock

from .helpers import GIB, NODE, decision, grant
from .pg import free_port

H = 3600.0


@pytest.fixture
def api(ledger: Ledger, clock: ManualClock) -> Iterator[httpx.Client]:
    t = clock.now()
    ledger.record_node(NODE, [("GPU-0", "H100", 80 * GIB)], Decimal("4.00"), t)
    for i in range(5):
        ledger.record_decision(
            decision(
                f"u{i}",
                grant("GPU-0", 16 * GIB),
                at=t + i,
                ns="ml" if i < 3 else "web",
                labels={"team": "a"} if i % 2 else {},
            )
        )
        ledger.mark_bound(f"u{i}", t + i + 0.5)
    ledger.release("u0", t + H, "completed")
    ledger.record_discrepancy(EventKind.LEAK, NODE.name, "GPU-0", "u1", 512, "pid 42", t + 10)
    clock.set(t + 2 * H)
    app = FastAPI()
    app.include_router(audit_router(lambda: ledger, clock))
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        yield client
    server.should_exit = True
    thread.join(timeout=30)


def _uids(body: dict[str, Any]) -> list[str]:
    return [item["pod_uid"] for item in body["items"]]


def test_filters(api: httpx.Client, clock: ManualClock) -> None:
    t0 = clock.now() - 2 * H
    assert _uids(api.get("/v1/allocations", params={"namespace": "web"}).json()) == ["u3", "u4"]
    assert _uids(api.get("/v1/allocations", params={"active": "false"}).json()) == ["u0"]
    assert _uids(api.get("/v1/allocations", params={"pod": "pod-u2"}).json()) == ["u2"]
    assert _uids(api.get("/v1/allocations", params={"pod": "u2", "node": NODE.name}).json()) == [
        "u2"
    ]
    assert _uids(api.get("/v1/allocations", params={"node": "other"}).json()) == []
    # from as unix seconds, to as RFC3339: rows overlapping [t0+1.5h, t0+2h)
    later = api.get(
        "/v1/allocations", params={"from": str(t0 + 1.5 * H), "to": "2026-01-01T02:00:00Z"}
    ).json()
    assert _uids(later) == ["u1", "u2", "u3", "u4"]
    one = api.get("/v1/allocations/1").json()
    assert one["pod_uid"] == "u0" and one["price_per_hour"] == "0.80"
    assert one["status"] == "ended" and one["labels"] == {}


def test_cursor_pagination_walks_everything_once(api: httpx.Client) -> None:
    seen, cursor = [], None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        body = api.get("/v1/allocations", params=params).json()
        seen += _uids(body)
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"u{i}" for i in range(5)]
    events = api.get("/v1/events", params={"limit": 4}).json()
    rest = api.get("/v1/events", params={"cursor": events["next_cursor"]}).json()
    seqs = [e["seq"] for e in events["items"] + rest["items"]]
    # the allocations' events and the node's price period (in the chain since migration 3)
    assert seqs == list(range(1, 14)) and rest["next_cursor"] is None


def test_chargeback_json_and_csv(api: httpx.Client, clock: ManualClock) -> None:
    t0 = clock.now() - 2 * H
    params = {"from": str(t0), "to": str(t0 + H), "group_by": "label:team"}
    body = api.get("/v1/chargeback", params=params).json()
    assert body["from"] == t0 and body["total_node_cost"] == "4.00"
    costs = {g["key"]: Decimal(g["cost"]) for g in body["groups"]}
    assert set(costs) == {"a", "(none)"}
    assert sum(costs.values()) + Decimal(body["total_idle"]) == Decimal("4.00")
    res = api.get("/v1/chargeback", params={**params, "format": "csv", "group_by": "namespace"})
    assert res.status_code == 200 and res.headers["content-type"].startswith("text/csv")
    table = list(csv.reader(io.StringIO(res.text)))
    assert table[0] == [
        "namespace",
        "allocations",
        "gib_hours",
        "cost_usd",
        "mean_used_mib",
        "mean_sm_util",
        "unpriced_gib_hours",
    ]
    assert [row[0] for row in table[1:]] == ["ml", "web"]
    assert table[1][3] == "2.40"  # 3 x 16 GiB of a $4/h 80 GiB GPU, ~1 h each


def test_discrepancies(api: httpx.Client) -> None:
    # last seen 2 h ago: no longer open (persistence gap 300 s), still in "all"
    assert api.get("/v1/discrepancies").json()["items"] == []
    (leak,) = api.get("/v1/discrepancies", params={"status": "all"}).json()["items"]
    assert leak["kind"] == "leak" and leak["max_amount_mib"] == 512 and leak["pod_uid"] == "u1"


@pytest.mark.parametrize(
    "path, params, status, needle",
    [
        (
            "/v1/allocations",
            {"from": "yesterday"},
            400,
            "parameter 'from': not RFC3339 or unix seconds: 'yesterday'",
        ),
        ("/v1/allocations", {"to": "2026-01-01T00:00:00"}, 400, "parameter 'to'"),  # no offset
        ("/v1/allocations", {"from": "100", "to": "50"}, 400, "parameter 'to'"),
        ("/v1/allocations", {"limit": "5000"}, 422, "limit"),
        ("/v1/allocations", {"active": "maybe"}, 422, "active"),
        ("/v1/allocations", {"cursor": "!!nonsense"}, 400, "parameter 'cursor'"),
        ("/v1/events", {"cursor": "eyJrIjoiYWxsb2MiLCJhIjozfQ"}, 400, "parameter 'cursor'"),
        ("/v1/chargeback", {"group_by": "colour"}, 400, "parameter 'group_by'"),
        ("/v1/chargeback", {"format": "xml"}, 422, "format"),
        ("/v1/chargeback", {"from": "nan"}, 400, "parameter 'from'"),
        ("/v1/discrepancies", {"status": "closed"}, 422, "status"),
        ("/v1/allocations/abc", {}, 422, "allocation_id"),
        ("/v1/allocations/999", {}, 404, "allocation 999 not found"),
    ],
)
def test_bad_parameters_name_the_parameter(
    api: httpx.Client, path: str, params: dict[str, str], status: int, needle: str
) -> None:
    res = api.get(path, params=params)
    assert res.status_code == status, res.text
    assert needle in res.text


def test_openapi_documents_response_models(api: httpx.Client) -> None:
    spec = api.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert {
        "AllocationPage",
        "AllocationOut",
        "ChargebackOut",
        "EventPage",
        "DiscrepancyPage",
    } <= set(schemas)
    assert "from" in schemas["ChargebackOut"]["properties"]
