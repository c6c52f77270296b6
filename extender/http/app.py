"""HTTP edge: FastAPI routes that decode, call the service, and encode.

The scheduler verbs read the raw body and decode it with msgspec (typed, partial,
unknown fields ignored): a 5,000-node NodeList is tens of MB and must not go through
a generic JSON-to-dict path. Bad input gets a 4xx naming what is wrong, never a 500,
and a refused request changes nothing (checks run before the service is called).

Their request bodies are documented in the OpenAPI (JSON Schema from the msgspec wire
types) so clients and the property-based fuzzing in tests/reliability see them.

Writes (agent reports, release) need an identity (extender.http.auth.Authenticator): the
shared token, or an agent's TokenReview-checked ServiceAccount token, which may only
report for the node its pod runs on. The read-only audit API can require a token.
Who may call what on which listener, and body limits, are decided in ``extender.http.edge``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import msgspec
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask

from extender import __version__
from extender.codec.namelists import ArgsDecoder, NameList
from extender.core.allocation import LedgerUnavailable
from extender.http.audit import audit_router
from extender.http.auth import Authenticator, TokenFile, bearer
from extender.http.bounds import (
    MAX_UID,
    Decoder,
    Invalid,
    check_args,
    check_binding,
    check_preemption,
    safe_decode,
)
from extender.http.edge import BodyBudget, Edge, EdgePolicy, route_limits
from extender.http.runtime import collect_due
from extender.http.tokenreview import Identity, Refused, ReviewUnavailable
from extender.http.webhook import WebhookPolicy, webhook_router
from extender.ledger.metrics import metrics_response
from extender.scheduling.service import SchedulingService
from extender.state.inventory import ReportRefused
from extender.wire.logs import RateLimitedLog
from extender.wire.protocol import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriority,
    binding_decoder,
    encode_filter_result,
    encoder,
    preemption_decoder,
)
from extender.wire.report import (
    MAX_REPORT_BYTES,
    NodeReport,
    ReportResponse,
    report_decoder,
    validate_report,
)

log = logging.getLogger("headroom.server")
# one line per window, not one per refused bind, while the ledger is down
ledger_down_log = RateLimitedLog(log, every_s=10.0)
JSON = "application/json"
# kube-scheduler binds pods concurrently (its binding cycles run apart from scheduling);
# the ledger takes one writer at a time, so more threads would only wait longer
BIND_WORKERS = 16
READY_PROBE_S = 2.0  # a readiness probe's own timeout is usually 1-5 s


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds {limit} bytes")


def _body_schema(t: type, components: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` documenting a raw-body route's JSON body with the wire type's
    JSON Schema (the route decodes it itself with msgspec)."""
    (schema,), defs = msgspec.json.schema_components(
        [t], ref_template="#/components/schemas/{name}"
    )
    components.update(defs)
    return {"requestBody": {"required": True, "content": {JSON: {"schema": schema}}}}


def _responses(t: type, components: dict[str, Any]) -> dict[int | str, dict[str, Any]]:
    (schema,), defs = msgspec.json.schema_components(
        [t], ref_template="#/components/schemas/{name}"
    )
    components.update(defs)
    return {200: {"content": {JSON: {"schema": schema}}}}


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than ``limit`` bytes without reading them all first."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _error(status: int, message: str) -> Response:
    return Response(encoder.encode({"Error": message}), status_code=status, media_type=JSON)


def _decode_error(e: msgspec.DecodeError | msgspec.ValidationError) -> str:
    return f"malformed request: {e}"


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
    app = FastAPI(title="headroom extender", version=__version__)
    bind_pool = ThreadPoolExecutor(max_workers=BIND_WORKERS, thread_name_prefix="bind")
    probe_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ready-probe")
    app.include_router(webhook_router(webhook or WebhookPolicy()))
    writers = auth or Authenticator(agent_token, None, allow_unauthenticated_reports)
    components: dict[str, Any] = {}

    @app.exception_handler(BodyTooLarge)
    async def _too_large(_: Request, e: BodyTooLarge) -> Response:
        return _error(413, str(e))

    @app.exception_handler(RecursionError)
    async def _too_deep(_: Request, e: RecursionError) -> Response:
        # a JSON parser (the webhook's json.loads too) ran out of stack on nesting
        return _error(400, "malformed request: JSON nested too deeply")

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
    app.add_middleware(Edge, policy=app.state.edge)

    @app.exception_handler(OverflowError)
    async def _overflow(_: Request, e: OverflowError) -> Response:
        # a number in the request too large for the ledger's 64-bit integers
        return _error(400, f"number out of range: {e}")

    @app.exception_handler(Invalid)
    async def _invalid(_: Request, e: Invalid) -> Response:
        return _error(e.status, str(e))

    @app.exception_handler(LedgerUnavailable)
    async def _ledger_down(_: Request, e: LedgerUnavailable) -> Response:
        ledger_down_log.error("ledger unavailable", extra={"error": str(e)[:300]})
        return _error(503, f"ledger unavailable: {e}")

    # candidate lists decoded once, then recognised by bytes
    args_decoder = ArgsDecoder(nodes=service.node_objects, index=service.names)

    async def decode(request: Request, decoder: Decoder, limit: int) -> object:
        return safe_decode(decoder, await read_body(request, limit))

    async def refresh_plans() -> None:
        """After a report or a bind is answered, on the event loop (plans are used from
        it alone): the plans of the shapes scheduled lately brought up to date
        (``SchedulingService.refresh``)."""
        try:
            service.refresh()
        except Exception:  # the next filter meets the same and answers; log, go on
            log.exception("refreshing plans failed")

    @app.post(
        "/filter",
        summary="kube-scheduler extender filter",
        openapi_extra=_body_schema(ExtenderArgs, components),
        responses=_responses(ExtenderFilterResult, components),
    )
    async def filter_(request: Request) -> Response:
        try:
            args = await decode(request, args_decoder, max_body_bytes)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return _error(400, _decode_error(e))
        check_args(args, max_nodes)  # type: ignore[arg-type]
        try:
            result, passing = service.filter(args)  # type: ignore[arg-type]
        except (msgspec.DecodeError, msgspec.ValidationError) as e:  # a Nodes item
            return _error(400, f"malformed node in Nodes.items: {e}")
        if not isinstance(result.NodeNames, NameList):
            return Response(encode_filter_result(result, passing), media_type=JSON)
        reply = encode_filter_result(result, passing, result.NodeNames.json())
        args_decoder.expect(result.NodeNames)  # prioritize's candidates, next
        return Response(reply, media_type=JSON)

    @app.post(
        "/prioritize",
        summary="kube-scheduler extender prioritize",
        openapi_extra=_body_schema(ExtenderArgs, components),
        responses=_responses(list[HostPriority], components),
    )
    async def prioritize(request: Request) -> Response:
        try:
            args = await decode(request, args_decoder, max_body_bytes)
            check_args(args, max_nodes)  # type: ignore[arg-type]
            scores = service.prioritize(args)  # type: ignore[arg-type]
        except (msgspec.DecodeError, msgspec.ValidationError) as e:  # body or a Nodes item
            return _error(400, _decode_error(e))
        except ValueError as e:  # DemandError too: the pod's ask cannot be read
            return _error(400, str(e))
        return Response(encoder.encode(scores), media_type=JSON)

    def bind_sync(body: bytes) -> Response:
        try:
            args = safe_decode(binding_decoder, body)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return _error(400, _decode_error(e))
        check_binding(args)
        result = service.bind(args)
        collect_due()  # a bind leaves objects alive: collected here, not in a filter
        return Response(encoder.encode(result), media_type=JSON)

    @app.post(
        "/bind",
        summary="kube-scheduler extender bind",
        openapi_extra=_body_schema(ExtenderBindingArgs, components),
        responses=_responses(ExtenderBindingResult, components),
    )
    async def bind(request: Request) -> Response:
        # the ledger write and the API call block: run them off the event loop, in binds'
        # own threads, so binds stuck on a slow database never starve other routes
        body = await read_body(request, max_bind_body_bytes)
        loop = asyncio.get_running_loop()
        response = await loop.run_in_executor(bind_pool, bind_sync, body)
        response.background = BackgroundTask(refresh_plans)  # the bound node changed
        return response

    @app.post(
        "/preempt",
        summary="kube-scheduler extender preempt",
        openapi_extra=_body_schema(ExtenderPreemptionArgs, components),
        responses=_responses(ExtenderPreemptionResult, components),
    )
    async def preempt(request: Request) -> Response:
        try:
            args = await decode(request, preemption_decoder, max_preempt_body_bytes)
            check_preemption(args, max_nodes)  # type: ignore[arg-type]
            result = service.preempt(args)  # type: ignore[arg-type]
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return _error(400, _decode_error(e))
        except ValueError as e:
            return _error(400, str(e))
        return Response(encoder.encode(result), media_type=JSON)

    async def writer(request: Request) -> Identity:
        """The caller's identity, or an HTTPException (401/403/503) saying why not."""
        header = request.headers.get("authorization")
        try:
            found = writers.quick(header)
            if found is None:  # an unknown token: ask the API server, off the event loop
                found = await run_in_threadpool(writers.identify, header)
        except Refused as e:
            log.info(
                "write refused", extra={"path": request.url.path, "status": e.status, "why": str(e)}
            )
            raise HTTPException(e.status, str(e)) from None
        except ReviewUnavailable as e:
            raise HTTPException(503, str(e)) from None
        return found

    @app.post(
        "/v1/reports",
        summary="node agent report (schema headroom.dev/report/v1)",
        openapi_extra=_body_schema(NodeReport, components),
        responses={
            **_responses(ReportResponse, components),
            401: {"description": "no or wrong credential"},
            403: {"description": "the credential may not report for this node"},
            409: {"description": "the report names a GPU that another node reports"},
        },
    )
    async def reports(request: Request, who: Identity = Depends(writer)) -> Response:  # noqa: B008
        try:
            report = await decode(request, report_decoder, MAX_REPORT_BYTES)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return JSONResponse({"detail": f"invalid report: {e}"}, status_code=422)
        problem = validate_report(report)  # type: ignore[arg-type]
        if problem:
            return JSONResponse({"detail": f"invalid report: {problem}"}, status_code=422)
        node = report.node  # type: ignore[attr-defined]
        if who.node is not None and who.node != node:
            log.warning(
                "report for another node refused",
                extra={"identity": who.name, "bound_node": who.node, "claimed": node},
            )
            return JSONResponse(
                {
                    "detail": f"forbidden: this agent's token is bound to node "
                    f"{who.node!r}; it may not report for node {node!r}"
                },
                status_code=403,
            )
        try:
            response = service.report(report)  # type: ignore[arg-type]
        except ReportRefused as e:  # another node's GPU: refused, nothing applied
            log.warning("report refused", extra={"node": node, "reason": str(e)})
            return JSONResponse({"detail": f"conflict: {e}"}, status_code=409)
        collect_due()  # reports leave most of what stays alive: collected here
        # once the agent has its answer: the plans of the shapes scheduled lately
        return Response(
            encoder.encode(response), media_type=JSON, background=BackgroundTask(refresh_plans)
        )

    @app.post(
        "/v1/pods/{uid}/release",
        summary="end a pod's allocations (standalone mode)",
        responses={
            401: {"description": "no or wrong credential"},
            403: {"description": "agents may not release pods"},
        },
    )
    def release(uid: str, reason: str = "completed", who: Identity = Depends(writer)) -> Response:  # noqa: B008
        if not who.admin:
            return JSONResponse(
                {
                    "detail": "forbidden: an agent token may only post reports; "
                    "releasing a pod needs the shared token"
                },
                status_code=403,
            )
        if len(uid) > MAX_UID:
            return JSONResponse({"detail": f"uid: at most {MAX_UID} characters"}, status_code=400)
        ended = service.release(uid, reason[:200])
        return JSONResponse({"pod_uid": uid, "ended": ended})

    def reader(request: Request) -> None:
        if audit_token is None:
            return
        token = bearer(request.headers.get("authorization"))
        if token is None or not audit_token.matches(token):
            raise HTTPException(
                401, "the audit API needs its bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    app.include_router(
        audit_router(lambda: service.ledger, service.clock), dependencies=[Depends(reader)]
    )

    @app.get("/metrics", summary="Prometheus metrics")
    def metrics() -> Response:
        body, content_type = metrics_response()
        return Response(body, media_type=content_type)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness, on the event loop: it answers whatever the ledger or binds are doing."""
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> Response:
        """Readiness: synced with the cluster and the ledger answering. The ledger is asked
        in a thread of its own, bounded, so a stuck database makes this say so in time."""
        if not ready():
            return JSONResponse({"status": "not ready", "reason": "not synced"}, 503)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.run_in_executor(probe_pool, service.ledger.ping), READY_PROBE_S
            )
        except Exception as e:  # timeout, LedgerUnavailable
            reason = f"ledger unavailable: {str(e) or type(e).__name__}"
            return JSONResponse({"status": "not ready", "reason": reason[:300]}, 503)
        return JSONResponse({"status": "ready"})

    _openapi = app.openapi

    def openapi() -> dict[str, Any]:
        """FastAPI's schema plus the wire types referenced by the raw-body routes."""
        if app.openapi_schema is None:
            schema = _openapi()
            schema.setdefault("components", {}).setdefault("schemas", {}).update(components)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
