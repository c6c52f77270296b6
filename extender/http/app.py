"""HTTP edge: the app, its routers, and the errors no route family maps itself.

Route families, each with one error mapping: kube-scheduler's verbs
(``extender.http.scheduler``, ``{"Error": ...}``, handed over by ``Edge`` without
FastAPI's router: they are called twice per pod), the writers' routes
(``extender.http.agents``, ``{"detail": ...}``), the read-only audit API
(``extender.http.audit``), the admission webhook (``extender.http.webhook``), and
health and metrics (``extender.http.health``). Request bodies are documented in the
OpenAPI (JSON Schema from the msgspec wire types) so clients and the property-based
fuzzing in tests/reliability see them. Who may call what on which listener, and body
limits, are decided in ``extender.http.edge``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import Response
from fastapi.telemetry import TelemetryConfig

from extender import __version__
from extender.codec import Codec
from extender.core.allocation import LedgerUnavailable
from extender.http.agents import agents_router
from extender.http.audit import audit_router
from extender.http.auth import Authenticator, TokenFile, bearer
from extender.http.bodies import JSON, BodyTooLarge, Schemas
from extender.http.bounds import Invalid
from extender.http.edge import BodyBudget, Edge, EdgePolicy, route_limits
from extender.http.health import health_router
from extender.http.nodes import nodes_router
from extender.http.page import page_router
from extender.http.scheduler import SchedulerVerbs, openapi_paths, scheduler_error
from extender.http.webhook import WebhookPolicy, webhook_router
from extender.scheduling.config import BIND_WORKERS
from extender.scheduling.service import SchedulingService

log = logging.getLogger("headroom.server")
# raised outside any family's own mapping (the audit API, the webhook, a writer's
# body): answered as the scheduler verbs answer them
SHARED_ERRORS = (BodyTooLarge, RecursionError, OverflowError, Invalid, LedgerUnavailable)


def create_app(
    service: SchedulingService,
    *,
    max_body_bytes: int = 64 * 1024 * 1024,
    max_nodes: int = 50_000,
    max_bind_body_bytes: int = 64 * 1024,
    max_preempt_body_bytes: int = 32 * 1024 * 1024,
    body_budget_bytes: int = 256 * 1024 * 1024,
    body_timeout_s: float = 30.0,
    scheduler_verbs: Literal["loopback", "any"] = "loopback",
    agent_token: TokenFile | None = None,
    allow_unauthenticated_reports: bool = False,
    auth: Authenticator | None = None,
    audit_token: TokenFile | None = None,
    ready: Callable[[], bool] = lambda: True,
    webhook: WebhookPolicy | None = None,
) -> FastAPI:
    # FastAPI's native OpenTelemetry asks the global providers on every request whether
    # one is configured; nothing in this process configures one (metrics: /metrics)
    off = TelemetryConfig(tracing=False, metrics=False, logs=False)
    app = FastAPI(title="headroom extender", version=__version__, telemetry=off)
    writers = auth or Authenticator(agent_token, None, allow_unauthenticated_reports)
    schemas = Schemas()
    for kind in SHARED_ERRORS:
        app.add_exception_handler(kind, _shared_error)

    limits = route_limits(max_body_bytes, max_bind_body_bytes, max_preempt_body_bytes)
    shared = writers.shared
    app.state.edge = EdgePolicy(
        route_limits=limits,
        # the largest body any route takes always fits
        budget=BodyBudget(max(body_budget_bytes, BodyBudget.HELD * max(limits.values()))),
        body_timeout_s=body_timeout_s,
        scheduler_verbs=scheduler_verbs,
        scheduler_token=shared.matches if shared is not None else None,
        audit_token=audit_token.matches if audit_token is not None else None,
    )

    async def refresh_plans() -> None:
        """After a report or a bind is answered, on the event loop (plans are used from
        it alone): the plans of the shapes scheduled lately brought up to date."""
        try:
            service.refresh()
        except Exception:  # the next filter meets the same and answers; log, go on
            log.exception("refreshing plans failed")

    bind_pool = ThreadPoolExecutor(max_workers=BIND_WORKERS, thread_name_prefix="bind")
    codec = Codec(service.node_changed)  # candidate lists decoded once, then known by bytes
    app.state.codec = codec  # where the edge keeps it (tests look at what it has read)
    verbs = SchedulerVerbs(service, codec, max_nodes, bind_pool, refresh_plans)
    app.add_middleware(Edge, policy=app.state.edge, verbs=verbs)

    def learn(node: str) -> None:
        """A reported node's name read ahead of the lists (``Codec.learn``), and the id
        it will have there told to the state, which then finds its row by it."""
        known = codec.learn(node)
        if known is not None:
            service.name_known(node, *known)

    app.state.learn = learn  # what the report route calls (the warm-up's nodes too)
    app.include_router(webhook_router(webhook or WebhookPolicy()))
    app.include_router(agents_router(service, writers, refresh_plans, schemas, learn))
    app.include_router(
        audit_router(lambda: service.ledger, service.clock),
        dependencies=[Depends(_reader(audit_token))],
    )
    app.include_router(nodes_router(service), dependencies=[Depends(_reader(audit_token))])
    app.include_router(page_router())  # holds no data: its script reads /v1 with the token
    app.include_router(health_router(lambda: service.ledger.ping(), ready))
    _document(app, schemas)
    return app


async def _shared_error(_: Request, e: Exception) -> Response:
    status, body = scheduler_error(e)
    return Response(body, status_code=status, media_type=JSON)


def _reader(audit_token: TokenFile | None) -> Callable[[Request], None]:
    """The audit API's dependency: its bearer token, when one is set."""

    def reader(request: Request) -> None:
        if audit_token is None:
            return
        token = bearer(request.headers.get("authorization"))
        if token is None or not audit_token.matches(token):
            raise HTTPException(
                401, "the audit API needs its bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    return reader


def _document(app: FastAPI, schemas: Schemas) -> None:
    """FastAPI's schema plus the scheduler verbs (served by ``Edge``, not FastAPI's
    router) and the wire types the raw-body routes reference."""
    made = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = made()
            schema.setdefault("paths", {}).update(openapi_paths(schemas))
            schema.setdefault("components", {}).setdefault("schemas", {}).update(schemas.components)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
