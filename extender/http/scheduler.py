"""kube-scheduler's verbs: filter, prioritize, bind, preempt.

One pure ASGI app (``SchedulerVerbs``) that ``Edge`` hands these four paths to once its
gate and body limits have passed them: kube-scheduler calls two of them for every pod
it places, and FastAPI's routing, dependency solving, request and response objects and
send wrappers cost more CPU per pod than the filter itself (docs/BENCHMARKS.md, "Ninth
measurement"). FastAPI still documents them (``openapi_paths``).

Each verb reads the raw body (a 5,000-node NodeList is tens of MB and must not go
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
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec

from extender.codec import Codec
from extender.core.allocation import LedgerUnavailable
from extender.core.runtime import collect_due
from extender.http.bodies import JSON, BodyTooLarge, Schemas
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

Reply = tuple[int, bytes]  # status, JSON body


def error(status: int, message: str) -> Reply:
    return status, encoder.encode({"Error": message})


def scheduler_error(e: Exception) -> Reply:
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


class ClientGone(Exception):
    """The caller disconnected before its whole body arrived: nobody to answer."""


class SchedulerVerbs:
    """The four verbs as one ASGI app; ``Edge`` calls it for ``SCHEDULER_VERBS`` only."""

    def __init__(
        self,
        service: SchedulingService,
        codec: Codec,
        max_nodes: int,
        bind_pool: ThreadPoolExecutor,
        refresh: Callable[[], Awaitable[None]],
    ) -> None:
        self.service, self.codec, self.max_nodes = service, codec, max_nodes
        self.bind_pool, self.refresh = bind_pool, refresh
        # each path of ``VERBS`` answered by the method of its name
        self.routes: dict[str, Callable[[bytes], Awaitable[bytes]]] = {
            path: getattr(self, path.strip("/")) for path, *_ in VERBS
        }
        self.latency = {p: SCHEDULING.request_seconds.labels(verb=p[1:]) for p in self.routes}
        self.loop: asyncio.AbstractEventLoop | None = None  # the one the service knows

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope["path"]
        verb = self.routes[path]
        if scope["method"] != "POST":
            await respond(send, *error(405, f"{path} takes POST"), [(b"allow", b"POST")])
            return
        started = time.perf_counter()
        try:
            status, body = 200, await verb(await read(receive))
        except ClientGone:
            return
        except MAPPED as e:
            status, body = scheduler_error(e)
        if WARM_UP not in scope:
            self.latency[path].observe(time.perf_counter() - started)
        await respond(send, status, body)
        if path == "/bind":
            await self.refresh()  # the bound node changed: plans brought up to date

    def decoded(self, body: bytes) -> ExtenderArgs:
        """The arguments, their bounds checked before any Node object is applied."""
        args = self.codec.decode_args(body)
        check_args(args, self.max_nodes)
        return self.codec.named(args)

    async def filter(self, body: bytes) -> bytes:
        args = self.decoded(body)
        loop = asyncio.get_running_loop()
        if loop is not self.loop:  # announced pods' plans are made where filters run
            self.service.serve_on(loop.call_soon_threadsafe)
            self.loop = loop
        result, passing = self.service.filter(args)
        return self.codec.encode_filter(result, passing)

    async def prioritize(self, body: bytes) -> bytes:
        return self.codec.encode_priorities(self.service.prioritize(self.decoded(body)))

    async def bind(self, body: bytes) -> bytes:
        # the ledger write and the API call block: run them off the event loop, in binds'
        # own threads, so binds stuck on a slow database never starve other routes
        # (what run_in_executor does, less its check that bind_sync is no coroutine
        # function: inspect's, 1.7 % of the loop's samples)
        return await asyncio.wrap_future(self.bind_pool.submit(self.bind_sync, body))

    def bind_sync(self, body: bytes) -> bytes:
        args = safe_decode(binding_decoder, body)
        check_binding(args)
        result = self.service.bind(args)
        collect_due()  # a bind leaves objects alive: collected here, not in a filter
        return encoder.encode(result)

    async def preempt(self, body: bytes) -> bytes:
        args = safe_decode(preemption_decoder, body)
        check_preemption(args, self.max_nodes)
        return encoder.encode(self.service.preempt(args))


async def read(receive: Any) -> bytes:
    """The whole body: ``Edge``'s ``receive`` refuses one past the path's limit."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def respond(
    send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    start = [(b"content-type", JSON.encode()), (b"content-length", str(len(body)).encode())]
    await send(
        {"type": "http.response.start", "status": status, "headers": start + (headers or [])}
    )
    await send({"type": "http.response.body", "body": body})


VERBS = (  # path, summary, request body, reply: the routes and their OpenAPI
    ("/filter", "kube-scheduler extender filter", ExtenderArgs, ExtenderFilterResult),
    ("/prioritize", "kube-scheduler extender prioritize", ExtenderArgs, list[HostPriority]),
    ("/bind", "kube-scheduler extender bind", ExtenderBindingArgs, ExtenderBindingResult),
    (
        "/preempt",
        "kube-scheduler extender preempt",
        ExtenderPreemptionArgs,
        ExtenderPreemptionResult,
    ),
)


def openapi_paths(schemas: Schemas) -> dict[str, Any]:
    """The verbs' OpenAPI path items: their bodies and replies are the wire types."""
    return {
        path: {
            "post": {
                "summary": summary,
                "operationId": path.strip("/"),
                **schemas.body(args),
                "responses": {str(k): v for k, v in schemas.reply(reply).items()},
            }
        }
        for path, summary, args, reply in VERBS
    }
