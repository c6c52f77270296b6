"""HTTP edge: FastAPI routes that decode, call the service, and encode.

The scheduler verbs read the raw body and decode it with msgspec (typed, partial,
unknown fields ignored): a 5,000-node NodeList is tens of MB and must not go through
a generic JSON-to-dict path. Bad input gets a 4xx naming what is wrong, never a 500,
and a refused request changes nothing (checks run before the service is called).

Their request bodies are documented in the OpenAPI (JSON Schema from the msgspec wire
types) so clients and the property-based fuzzing in tests/reliability see them.

Writes (agent reports, release) need an identity (extender.auth.Authenticator): the
shared token, or an agent's TokenReview-checked ServiceAccount token, which may only
report for the node its pod runs on. The read-only audit API can require a token.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask

from extender import __version__
from extender.allocation import LedgerUnavailable
from extender.audit import audit_router
from extender.auth import Authenticator, TokenFile, bearer
from extender.inventory import ReportRefused
from extender.metrics import metrics_response
from extender.namelists import ArgsDecoder, NameList
from extender.protocol import (
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
from extender.reports import (
    MAX_REPORT_BYTES,
    NodeReport,
    ReportResponse,
    report_decoder,
    validate_report,
)
from extender.runtime import collect_due
from extender.service import SchedulingService
from extender.tokenreview import Identity, Refused, ReviewUnavailable
from extender.webhook import WebhookPolicy, webhook_router

log = logging.getLogger("headroom.server")
JSON = "application/json"


MAX_NAME = 253  # a Kubernetes object name (DNS subdomain) is at most 253 characters
MAX_UID = 128


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds {limit} bytes")


class Invalid(Exception):
    """A decoded request that breaks a bound; answered with ``status`` and the message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class BodyLimit:
    """Pure ASGI middleware: no route (the webhook and audit API too) reads more than
    ``limit`` bytes, declared or streamed (chunked). Pure ASGI, not BaseHTTPMiddleware,
    to keep the scheduler verbs' hot path free of a per-request task."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for key, value in scope.get("headers", ()):
            if key == b"content-length" and value.isdigit() and int(value) > self.limit:
                body = encoder.encode({"Error": str(BodyTooLarge(self.limit))})
                await send(
                    {
                        "type": "http.response.start",
                        "status": 413,
                        "headers": [
                            (b"content-type", JSON.encode()),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise BodyTooLarge(self.limit)
            return message

        await self.app(scope, counted, send)


class Decoder(Protocol):
    """A msgspec decoder, or one that wraps it (``ArgsDecoder``)."""

    def decode(self, body: bytes, /) -> Any: ...


def safe_decode(decoder: Decoder, body: bytes) -> Any:
    """``decoder.decode`` that answers 400 for nesting deep enough to exhaust the stack
    (msgspec raises RecursionError while skipping deeply nested unknown fields)."""
    try:
        return decoder.decode(body)
    except RecursionError:
        raise Invalid(400, "malformed request: JSON nested too deeply") from None


def check_args(args: ExtenderArgs, max_nodes: int) -> None:
    """Bounds on a filter/prioritize body before the service sees it."""
    if args.Nodes is not None and args.NodeNames is not None:
        # kube-scheduler sends one (NodeNames when nodeCacheCapable): with both, which
        # list a filter reply would echo is a guess, and a reply echoing the wrong one
        # indexed an empty Nodes list (found by tests/reliability/test_fuzz_bodies.py)
        raise Invalid(
            400,
            "request has both Nodes and NodeNames; send one (NodeNames "
            "when the extender is nodeCacheCapable, else Nodes)",
        )
    names = args.NodeNames or []  # each 1..253 characters: checked by the decoder
    count = len(names) + (len(args.Nodes.items) if args.Nodes is not None else 0)
    if count > max_nodes:
        raise Invalid(413, f"{count} nodes in one request is more than the limit of {max_nodes}")
    if args.Pod is not None:
        meta = args.Pod.metadata
        if len(meta.name) > MAX_NAME or len(meta.namespace) > MAX_NAME or len(meta.uid) > MAX_UID:
            raise Invalid(
                400,
                f"Pod.metadata: name/namespace at most {MAX_NAME} characters, "
                f"uid at most {MAX_UID}",
            )


def check_binding(args: ExtenderBindingArgs) -> None:
    fields = ("PodName", "PodNamespace", "PodUID", "Node")
    missing = [f for f in fields if not getattr(args, f)]
    if missing:
        raise Invalid(400, f"malformed bind request: missing {', '.join(missing)}")
    if (
        max(len(args.PodName), len(args.PodNamespace), len(args.Node)) > MAX_NAME
        or len(args.PodUID) > MAX_UID
    ):
        raise Invalid(
            400,
            f"malformed bind request: names at most {MAX_NAME} characters, "
            f"PodUID at most {MAX_UID}",
        )


def check_preemption(args: ExtenderPreemptionArgs, max_nodes: int) -> None:
    count = len(args.NodeNameToVictims or {}) + len(args.NodeNameToMetaVictims or {})
    if count > max_nodes:
        raise Invalid(413, f"{count} candidate nodes is more than the limit of {max_nodes}")


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
    agent_token: TokenFile | None = None,
    allow_unauthenticated_reports: bool = False,
    auth: Authenticator | None = None,
    audit_token: TokenFile | None = None,
    ready: Callable[[], bool] = lambda: True,
    webhook: WebhookPolicy | None = None,
) -> FastAPI:
    app = FastAPI(title="headroom extender", version=__version__)
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

    app.add_middleware(BodyLimit, limit=max_body_bytes)

    @app.exception_handler(OverflowError)
    async def _overflow(_: Request, e: OverflowError) -> Response:
        # a number in the request too large for the ledger's 64-bit integers
        return _error(400, f"number out of range: {e}")

    @app.exception_handler(Invalid)
    async def _invalid(_: Request, e: Invalid) -> Response:
        return _error(e.status, str(e))

    @app.exception_handler(LedgerUnavailable)
    async def _ledger_down(_: Request, e: LedgerUnavailable) -> Response:
        log.error("ledger unavailable", extra={"error": str(e)[:300]})
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
        # the ledger write and the API call block: run them off the event loop
        response = await run_in_threadpool(bind_sync, await read_body(request, max_body_bytes))
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
            args = await decode(request, preemption_decoder, max_body_bytes)
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
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> Response:
        if ready():
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "not ready"}, status_code=503)

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
