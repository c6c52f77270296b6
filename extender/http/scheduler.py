"""kube-scheduler's verbs: filter, prioritize, bind, preempt.

Each route reads the raw body (a 5,000-node NodeList is tens of MB and must not go
through a generic JSON-to-dict path), decodes it (the codec for filter and prioritize,
msgspec for the others), checks its bounds before the service is called (a refused
request changes nothing), calls the service once and encodes the answer. Their errors
have one mapping (``scheduler_error``): kube-scheduler reads ``Error``, and bad input
gets a 4xx naming what is wrong, never a 500.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import msgspec
from fastapi import APIRouter, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.background import BackgroundTask

from extender.codec import Codec
from extender.core.allocation import LedgerUnavailable
from extender.core.runtime import collect_due
from extender.http.bodies import JSON, BodyTooLarge, Schemas, read_body
from extender.http.bounds import Invalid, check_args, check_binding, check_preemption, safe_decode
from extender.ledger.metrics import SCHEDULING
from extender.scheduling.service import SchedulingService
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
    encoder,
    preemption_decoder,
)

log = logging.getLogger("headroom.server")
# an ASGI scope key only an in-process caller can set (``extender.http.warmup``): the
# request is not counted in the latency histogram users read
WARM_UP = "headroom.warm_up"
# one line per window, not one per refused bind, while the ledger is down
ledger_down_log = RateLimitedLog(log, every_s=10.0)


def error(status: int, message: str) -> Response:
    return Response(encoder.encode({"Error": message}), status_code=status, media_type=JSON)


def scheduler_error(e: Exception) -> Response:
    """The scheduler verbs' one error mapping; anything else is a bug (a 500)."""
    if isinstance(e, BodyTooLarge):
        return error(413, str(e))
    if isinstance(e, Invalid):
        return error(e.status, str(e))
    if isinstance(e, msgspec.DecodeError):  # ValidationError too
        return error(400, f"malformed request: {e}")
    if isinstance(e, RecursionError):  # a JSON parser ran out of stack on nesting
        return error(400, "malformed request: JSON nested too deeply")
    if isinstance(e, OverflowError):  # a number too large for the ledger's integers
        return error(400, f"number out of range: {e}")
    if isinstance(e, LedgerUnavailable):
        ledger_down_log.error("ledger unavailable", extra={"error": str(e)[:300]})
        return error(503, f"ledger unavailable: {e}")
    if isinstance(e, ValueError):  # the pod's ask cannot be read, a malformed Node
        return error(400, str(e))
    raise e


MAPPED = (
    BodyTooLarge,
    Invalid,
    msgspec.DecodeError,
    RecursionError,
    OverflowError,
    LedgerUnavailable,
    ValueError,
)


class SchedulerRoute(APIRoute):
    """A route whose errors go through ``scheduler_error``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        latency = SCHEDULING.request_seconds.labels(verb=self.path.strip("/"))

        async def handle(request: Request) -> Response:
            started = time.perf_counter()
            try:
                return await handler(request)
            except MAPPED as e:
                return scheduler_error(e)
            finally:
                if WARM_UP not in request.scope:
                    latency.observe(time.perf_counter() - started)

        return handle


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int
    max_nodes: int
    max_bind_body_bytes: int
    max_preempt_body_bytes: int


def scheduler_router(
    service: SchedulingService,
    codec: Codec,
    limits: Limits,
    bind_pool: ThreadPoolExecutor,
    refresh: Callable[[], Awaitable[None]],
    schemas: Schemas,
) -> APIRouter:
    router = APIRouter(route_class=SchedulerRoute)

    def decoded(body: bytes) -> ExtenderArgs:
        """The arguments, their bounds checked before any Node object is applied."""
        args = codec.decode_args(body)
        check_args(args, limits.max_nodes)
        return codec.named(args)

    @router.post(
        "/filter",
        summary="kube-scheduler extender filter",
        openapi_extra=schemas.body(ExtenderArgs),
        responses=schemas.reply(ExtenderFilterResult),
    )
    async def filter_(request: Request) -> Response:
        body = await read_body(request, limits.max_body_bytes)
        result, passing = service.filter(decoded(body))
        return Response(codec.encode_filter(result, passing), media_type=JSON)

    @router.post(
        "/prioritize",
        summary="kube-scheduler extender prioritize",
        openapi_extra=schemas.body(ExtenderArgs),
        responses=schemas.reply(list[HostPriority]),
    )
    async def prioritize(request: Request) -> Response:
        body = await read_body(request, limits.max_body_bytes)
        answer = service.prioritize(decoded(body))
        return Response(codec.encode_priorities(answer), media_type=JSON)

    def bind_sync(body: bytes) -> Response:
        try:
            args = safe_decode(binding_decoder, body)
            check_binding(args)
            result = service.bind(args)
        except MAPPED as e:
            return scheduler_error(e)
        collect_due()  # a bind leaves objects alive: collected here, not in a filter
        return Response(encoder.encode(result), media_type=JSON)

    @router.post(
        "/bind",
        summary="kube-scheduler extender bind",
        openapi_extra=schemas.body(ExtenderBindingArgs),
        responses=schemas.reply(ExtenderBindingResult),
    )
    async def bind(request: Request) -> Response:
        # the ledger write and the API call block: run them off the event loop, in binds'
        # own threads, so binds stuck on a slow database never starve other routes
        body = await read_body(request, limits.max_bind_body_bytes)
        loop = asyncio.get_running_loop()
        response = await loop.run_in_executor(bind_pool, bind_sync, body)
        response.background = BackgroundTask(refresh)  # the bound node changed
        return response

    @router.post(
        "/preempt",
        summary="kube-scheduler extender preempt",
        openapi_extra=schemas.body(ExtenderPreemptionArgs),
        responses=schemas.reply(ExtenderPreemptionResult),
    )
    async def preempt(request: Request) -> Response:
        body = await read_body(request, limits.max_preempt_body_bytes)
        args = safe_decode(preemption_decoder, body)
        check_preemption(args, limits.max_nodes)
        result = service.preempt(args)
        return Response(encoder.encode(result), media_type=JSON)

    return router
