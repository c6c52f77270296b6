"""The HTTP edge's first gate: who may call which route on which listener, and how many
request-body bytes the process takes in (issue 23, F5 and F6; docs/reliability.md).

One pure ASGI middleware, in front of every route, decides before a byte of the body is
read:

- **Listeners by audience** (docs/reliability.md). kube-scheduler's verbs are for the
  kube-scheduler beside the extender: on the plain listener they answer loopback peers
  (``scheduler_verbs="loopback"``) or a caller with the shared bearer token; on the TLS
  listener, which every pod can reach because the API server must (the webhook), only the
  token. The audit API on TLS needs the audit token, configured or not (no token set:
  nobody). Ops routes other than the probes (/metrics, the OpenAPI pages) are plain-only.
- **Body size per route**, declared (``Content-Length``) or streamed: a binding is ~100
  bytes and gets 64 KiB, not the 64 MiB a 5,000-node NodeList may need.
- **A global budget** for bodies being received: bodies over ``FREE`` are charged
  (twice their size: see ``BodyBudget``) when declared, or as they stream in, and given
  back when the response is done;
  a request that does not fit is answered 503 at once, unread, instead of being buffered.
  Bodies up to ``FREE`` are not charged, so a bind is never refused because large bodies
  are in flight (they are bounded by the connection cap instead).
- **Body timeout**: the whole body within ``body_timeout_s`` of the headers, else 408.

Every refusal uses its route family's error shape: ``{"Error": ...}`` for the scheduler
verbs (the protocol's field), ``{"error": ...}`` for the webhook, ``{"detail": ...}`` for
the rest (FastAPI's), and closes the connection when the body was not read.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from extender.wire.logs import RateLimitedLog
from extender.wire.report import MAX_REPORT_BYTES

log = logging.getLogger("headroom.edge")
limited = RateLimitedLog(log, every_s=10.0)

FREE = 64 * 1024  # bodies up to this are not charged to the budget
SMALL = 64 * 1024  # any route not listed below
WEBHOOK_BYTES = 4 * 1024 * 1024  # AdmissionReview: object + oldObject, each < 1.5 MiB (etcd)
SCHEDULER_VERBS = frozenset({"/filter", "/prioritize", "/bind", "/preempt"})
PROBES = frozenset({"/healthz", "/readyz"})

Family = Literal["scheduler", "webhook", "write", "audit", "ops"]


def route_limits(scheduler: int, bind: int, preempt: int) -> dict[str, int]:
    """Body limit per path (others: ``SMALL``): each sized to what its caller sends."""
    return {
        "/filter": scheduler,
        "/prioritize": scheduler,
        "/bind": bind,
        "/preempt": preempt,
        "/v1/reports": MAX_REPORT_BYTES,
        "/admit/pods": WEBHOOK_BYTES,
    }


def family(path: str) -> Family:
    """Which audience a path is for (and so which error shape it answers with)."""
    if path in SCHEDULER_VERBS:
        return "scheduler"
    if path.startswith("/admit/"):
        return "webhook"
    if path == "/v1/reports" or (path.startswith("/v1/pods/") and path.endswith("/release")):
        return "write"
    if path.startswith("/v1/"):
        return "audit"
    return "ops"


def error_body(fam: Family, message: str) -> bytes:
    key = {"scheduler": "Error", "webhook": "error"}.get(fam, "detail")
    return json.dumps({key: message}).encode()


class Refusal(Exception):
    """Answer ``status`` with ``message`` in the family's shape; raised from ``receive``
    too (a streamed body that grows past its limit or the budget, or stalls)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class BodyBudget:
    """Memory held by request bodies being received and decoded, all listeners (one
    event loop: no lock). A body is held twice while it is read (the received chunks
    and their joined copy, which the decoders need as ``bytes``), so each body byte
    costs ``HELD`` bytes of the budget."""

    HELD = 2

    def __init__(self, limit: int) -> None:
        self.limit, self.used, self.refused = limit, 0, 0

    def take(self, body_bytes: int) -> bool:
        cost = body_bytes * self.HELD
        if self.used + cost > self.limit:
            self.refused += 1
            return False
        self.used += cost
        return True

    def give(self, body_bytes: int) -> None:
        self.used -= body_bytes * self.HELD


@dataclass
class EdgePolicy:
    """What ``Edge`` enforces; built from Settings by the app."""

    route_limits: dict[str, int]
    budget: BodyBudget
    body_timeout_s: float = 30.0
    scheduler_verbs: Literal["loopback", "any"] = "loopback"
    # bearer token -> accepted? (None: no such credential configured, nobody has it)
    scheduler_token: Callable[[str], bool] | None = None
    audit_token: Callable[[str], bool] | None = None

    def limit(self, path: str) -> int:
        return self.route_limits.get(path, SMALL)

    def gate(self, scope: dict[str, Any], fam: Family) -> Refusal | None:
        """The refusal for a caller that may not use this route here, else None."""
        tls = scope.get("scheme") == "https"
        token = _bearer(scope)
        if fam == "scheduler":
            if _accepts(self.scheduler_token, token):
                return None
            if token is not None:
                return Refusal(401, "wrong bearer token for the scheduler verbs", _CHALLENGE)
            if tls:
                return Refusal(
                    401,
                    "the scheduler verbs are not served on the TLS listener without the "
                    "shared bearer token; kube-scheduler calls the plain port over loopback",
                    _CHALLENGE,
                )
            if self.scheduler_verbs == "any" or _local(scope):
                return None
            return Refusal(
                403,
                "the scheduler verbs answer kube-scheduler over loopback (or a caller "
                "with the shared bearer token); set scheduler_verbs=any for a remote "
                "kube-scheduler",
            )
        if not tls:
            return None  # plain listener: the routes' own checks (reports, audit token)
        if fam == "audit" and not _accepts(self.audit_token, token):
            return Refusal(
                401, "the audit API on the TLS listener needs the audit bearer token", _CHALLENGE
            )
        if fam == "ops" and scope["path"] not in PROBES:
            return Refusal(404, "not served on the TLS listener; use the plain port")
        return None


_CHALLENGE = {"www-authenticate": "Bearer"}


def _accepts(check: Callable[[str], bool] | None, token: str | None) -> bool:
    return check is not None and token is not None and check(token)


def _bearer(scope: dict[str, Any]) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == b"authorization":
            scheme, _, rest = value.decode("latin-1").partition(" ")
            if scheme.lower() != "bearer":
                return None
            return rest.strip() or None
    return None


def _local(scope: dict[str, Any]) -> bool:
    """A loopback peer. A client that is not an IP address is in-process (an ASGI test
    client) or on a Unix socket: local too. (uvicorn runs without proxy headers, so a
    TCP peer's address is its socket's.)"""
    client = scope.get("client")
    return not client or _loopback(client[0])


@functools.lru_cache(maxsize=1024)
def _loopback(host: str) -> bool:
    """Parsed once per peer address: kube-scheduler's is the same on every call."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return True
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


_CLOSE = (b"connection", b"close")


def _has_body(scope: dict[str, Any], declared: int | None) -> bool:
    if declared is not None:
        return declared > 0
    return any(k == b"transfer-encoding" for k, _ in scope.get("headers", ()))


def _declared(scope: dict[str, Any]) -> int | None:
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            return int(value) if value.isdigit() else None
    return None


class Edge:
    """Pure ASGI (no per-request task on the scheduler verbs' hot path). Added with
    ``app.add_middleware`` so it sits inside Starlette's error middleware: a ``Refusal``
    raised from ``receive`` in a route comes back here and is answered. The scheduler
    verbs go from here straight to ``verbs`` (``extender.http.scheduler``); every other
    path to the app's router."""

    def __init__(self, app: Any, policy: EdgePolicy, verbs: Any) -> None:
        self.app, self.policy, self.verbs = app, policy, verbs

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, policy = scope["path"], self.policy
        fam = family(path)
        refusal = policy.gate(scope, fam)
        if refusal is not None:
            await _answer(send, fam, refusal, close=True)
            return
        limit, declared = policy.limit(path), _declared(scope)
        if declared is not None and declared > limit:
            await _answer(send, fam, _too_large(path, limit), close=True)
            return
        charged = 0
        if declared is not None and declared > FREE:
            if not policy.budget.take(declared):
                await _answer(send, fam, _budget_full(policy.budget), close=True)
                return
            charged = declared
        state = {"seen": 0, "charged": charged, "done": False, "started": False}
        deadline = asyncio.get_running_loop().time() + policy.body_timeout_s

        async def guarded_receive() -> Any:
            if state["done"]:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise Refusal(
                    408, f"request body not received within {policy.body_timeout_s:g} s"
                ) from None
            if message["type"] != "http.request":
                state["done"] = True
                return message
            state["seen"] += len(message.get("body", b""))
            if state["seen"] > limit:
                raise _too_large(path, limit)
            need = state["seen"] - state["charged"]
            if declared is None and state["seen"] > FREE and need > 0:
                if not policy.budget.take(need):
                    raise _budget_full(policy.budget)
                state["charged"] += need
            state["done"] = not message.get("more_body", False)
            return message

        async def tracking_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
                if not state["done"] and _has_body(scope, declared):
                    # answered with the body unread (a GET with a body, a route that
                    # reads none): the rest would keep the connection alive as long as
                    # the client trickles it, so this one carries no further request
                    message = {**message, "headers": [*message.get("headers", ()), _CLOSE]}
            await send(message)

        target = self.verbs if fam == "scheduler" else self.app
        try:
            await target(scope, guarded_receive, tracking_send)
        except Refusal as e:
            if not state["started"]:  # else the response is half out: uvicorn closes it
                await _answer(send, fam, e, close=True)
        finally:
            policy.budget.give(state["charged"])


def _too_large(path: str, limit: int) -> Refusal:
    return Refusal(413, f"request body exceeds {limit} bytes (the limit for {path})")


def _budget_full(budget: BodyBudget) -> Refusal:
    limited.warning(
        "request refused: body budget full",
        extra={"in_flight_bytes": budget.used, "budget_bytes": budget.limit},
    )
    return Refusal(
        503,
        f"too many large request bodies in flight ({budget.used} of {budget.limit} bytes); retry",
        {"retry-after": "1"},
    )


async def _answer(send: Any, fam: Family, refusal: Refusal, close: bool) -> None:
    body = error_body(fam, refusal.message)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *((k.encode(), v.encode()) for k, v in refusal.headers.items()),
    ]
    if close:  # the body (if any) was not read: this connection carries no more requests
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
