"""HTTP edge: FastAPI routes that decode, call the service, and encode.

The scheduler verbs read the raw body and decode it with msgspec (typed, partial,
unknown fields ignored): a 5,000-node NodeList is tens of MB and must not go through
a generic JSON-to-dict path. Bad input gets a 4xx naming what is wrong, never a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from extender import __version__
from extender.audit import audit_router
from extender.auth import TokenFile, bearer
from extender.metrics import metrics_response
from extender.protocol import (
    args_decoder,
    binding_decoder,
    encode_filter_result,
    encoder,
    preemption_decoder,
)
from extender.reports import MAX_REPORT_BYTES, report_decoder, validate_report
from extender.service import SchedulingService
from extender.webhook import WebhookPolicy, webhook_router

log = logging.getLogger("headroom.server")
JSON = "application/json"


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds {limit} bytes")


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
    agent_token: TokenFile | None = None,
    allow_unauthenticated_reports: bool = False,
    ready: Callable[[], bool] = lambda: True,
    webhook: WebhookPolicy | None = None,
) -> FastAPI:
    app = FastAPI(title="headroom extender", version=__version__)
    app.include_router(webhook_router(webhook or WebhookPolicy()))

    @app.exception_handler(BodyTooLarge)
    async def _too_large(_: Request, e: BodyTooLarge) -> Response:
        return _error(413, str(e))

    async def decode(request: Request, decoder: msgspec.json.Decoder, limit: int) -> object:
        body = await read_body(request, limit)
        return decoder.decode(body)

    @app.post("/filter", summary="kube-scheduler extender filter")
    async def filter_(request: Request) -> Response:
        try:
            args = await decode(request, args_decoder, max_body_bytes)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return _error(400, _decode_error(e))
        result, passing = service.filter(args)  # type: ignore[arg-type]
        return Response(encode_filter_result(result, passing), media_type=JSON)

    @app.post("/prioritize", summary="kube-scheduler extender prioritize")
    async def prioritize(request: Request) -> Response:
        try:
            args = await decode(request, args_decoder, max_body_bytes)
            scores = service.prioritize(args)  # type: ignore[arg-type]
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return _error(400, _decode_error(e))
        except ValueError as e:
            return _error(400, str(e))
        return Response(encoder.encode(scores), media_type=JSON)

    def bind_sync(body: bytes) -> Response:
        try:
            args = binding_decoder.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return _error(400, _decode_error(e))
        fields = ("PodName", "PodNamespace", "PodUID", "Node")
        missing = [f for f in fields if not getattr(args, f)]
        if missing:
            return _error(400, f"malformed bind request: missing {', '.join(missing)}")
        return Response(encoder.encode(service.bind(args)), media_type=JSON)

    @app.post("/bind", summary="kube-scheduler extender bind")
    async def bind(request: Request) -> Response:
        # the ledger write and the API call block: run them off the event loop
        return await run_in_threadpool(bind_sync, await read_body(request, max_body_bytes))

    @app.post("/preempt", summary="kube-scheduler extender preempt")
    async def preempt(request: Request) -> Response:
        try:
            args = await decode(request, preemption_decoder, max_body_bytes)
            result = service.preempt(args)  # type: ignore[arg-type]
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return _error(400, _decode_error(e))
        except ValueError as e:
            return _error(400, str(e))
        return Response(encoder.encode(result), media_type=JSON)

    def authorized(request: Request) -> bool:
        if agent_token is None:
            return allow_unauthenticated_reports
        token = bearer(request.headers.get("authorization"))
        return token is not None and agent_token.matches(token)

    @app.post("/v1/reports", summary="node agent report (schema headroom.dev/report/v1)")
    async def reports(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"detail": "missing or wrong bearer token"}, status_code=401)
        try:
            report = await decode(request, report_decoder, MAX_REPORT_BYTES)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return JSONResponse({"detail": f"invalid report: {e}"}, status_code=422)
        problem = validate_report(report)  # type: ignore[arg-type]
        if problem:
            return JSONResponse({"detail": f"invalid report: {problem}"}, status_code=422)
        response = service.report(report)  # type: ignore[arg-type]
        return Response(encoder.encode(response), media_type=JSON)

    @app.post("/v1/pods/{uid}/release", summary="end a pod's allocations (standalone mode)")
    def release(uid: str, request: Request, reason: str = "completed") -> Response:
        if not authorized(request):
            return JSONResponse({"detail": "missing or wrong bearer token"}, status_code=401)
        ended = service.release(uid, reason[:200])
        return JSONResponse({"pod_uid": uid, "ended": ended})

    app.include_router(audit_router(lambda: service.ledger, service.clock))

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

    return app
