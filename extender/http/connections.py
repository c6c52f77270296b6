"""Connections at the HTTP edge: a cap below the open-file limit, and timeouts for
connections that say nothing or say it slowly (issue 23, F7; docs/reliability.md).

uvicorn closes a keep-alive connection ``timeout_keep_alive`` seconds after a response,
but never one that has not sent a request yet, nor one that trickles its headers: 1,200
idle connections were all still open after 40 s, and at a 1,024 open-file limit the
process could no longer accept /healthz while asyncio logged "socket.accept() out of
system resource" 110,687 times in 10 s. Here, in uvicorn's own protocol (httptools):

- a new connection is closed after ``idle_s`` without a request (uvicorn cancels that
  timer on the first byte, as it does its keep-alive timer);
- a request's headers must be complete ``header_s`` after its first byte (408, closed);
- at ``cap`` open connections, over both listeners, a new one first closes the oldest
  connection that has no request being answered, else it is answered 503 and closed,
  so the process keeps file descriptors for the ledger, the API server and its probes,
  and a probe still gets in; the log line for it is rate-limited.

The body's own deadline is the ASGI edge's (``extender.http.edge``). A TLS connection counts
once its handshake is done; until then asyncio's handshake timeout (60 s) bounds it.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from extender.wire.logs import RateLimitedLog

log = logging.getLogger("headroom.connections")
limited = RateLimitedLog(log, every_s=10.0)

# asyncio accepts up to the listen backlog in one go before any connection_made runs
# (and so before the cap is looked at): a short backlog bounds that overshoot
BACKLOG = 128
# per listener (2) one backlog of overshoot, plus the ledger, watches, TokenReviews, files
RESERVE_FDS = 2 * BACKLOG + 128
MAX_AUTO = 4096  # ~30 KiB each: 4,096 idle connections stay well inside a 1 GiB pod
FILE_LIMIT_WANTED = 65536

_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n"
    b"retry-after: 1\r\nconnection: close\r\n\r\n"
)
_SLOW = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def raise_file_limit(wanted: int = FILE_LIMIT_WANTED) -> int:
    """Lift the soft open-file limit towards the hard one; the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else FILE_LIMIT_WANTED


def connection_cap(configured: int, file_limit: int) -> int:
    """``configured`` (0: automatic), always ``RESERVE_FDS`` below the file limit."""
    ceiling = max(16, file_limit - RESERVE_FDS)
    return min(configured or MAX_AUTO, ceiling)


class ConnectionCap:
    """Open connections over all listeners, oldest first (one event loop: no lock)."""

    def __init__(self, cap: int) -> None:
        self.cap, self.refused, self.evicted = cap, 0, 0
        self.members: dict[Any, None] = {}

    @property
    def open(self) -> int:
        return len(self.members)

    def make_room(self) -> bool:
        """At the cap, close the oldest connection with no request being answered (idle,
        or still sending its headers): a flood of idle connections then costs the
        attacker's own, never kubelet's probe or kube-scheduler. False: all are busy."""
        for member in self.members:
            cycle = member.cycle
            if cycle is None or cycle.response_complete:
                del self.members[member]
                member.transport.close()
                self.evicted += 1
                return True
        return False


def guarded_protocol(cap: ConnectionCap, idle_s: float, header_s: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with the cap and the idle and header timeouts; pass
    it as ``uvicorn.Config(http=...)`` (with ``timeout_keep_alive=idle_s``)."""

    class Guarded(HttpToolsProtocol):
        _counted = False
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            if cap.open >= cap.cap:
                made_room = cap.make_room()
                cap.refused += 0 if made_room else 1
                limited.warning(
                    "at the connection cap: "
                    + ("closed the oldest idle connection" if made_room else "refused one"),
                    key="connection cap",
                    extra={
                        "cap": cap.cap,
                        "evicted_total": cap.evicted,
                        "refused_total": cap.refused,
                    },
                )
                if not made_room:
                    transport.write(_REFUSED)
                    transport.close()
                    return
            self._counted = True
            cap.members[self] = None
            super().connection_made(transport)
            self.timeout_keep_alive_task = self.loop.call_later(
                idle_s, self.timeout_keep_alive_handler
            )

        def connection_lost(self, exc: Exception | None) -> None:
            if not self._counted:
                return
            self._counted = False
            cap.members.pop(self, None)
            self._stop_header_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._counted:
                super().data_received(data)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_s, self._headers_too_slow)

        def on_headers_complete(self) -> None:
            self._stop_header_timer()
            super().on_headers_complete()

        def _stop_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.write(_SLOW)
                self.transport.close()

    return Guarded


def quiet_accept_errors(every_s: float = 10.0) -> None:
    """asyncio logs each failed accept (EMFILE) as an ERROR with a traceback, in a
    loop: one line per ``every_s`` instead, with the count of those dropped."""
    aio = logging.getLogger("asyncio")
    if not any(getattr(f, "headroom_accept", False) for f in aio.filters):
        f = RateLimitedLog(aio, every_s).filter("socket.accept() out of system resource")
        f.headroom_accept = True  # type: ignore[attr-defined]
        aio.addFilter(f)
