"""Kept-alive connections to the API server for the bind path's one POST per pod.

The Binding is the one API call per pod on the scheduling path. Through the Kubernetes
client's urllib3 pool it took 0.72-0.79 ms of CPU per POST, through this 0.42-0.45 ms,
and bare ``http.client`` 0.31-0.33 ms (bench/bindpost.py; docs/BENCHMARKS.md, twelfth
throughput measurement). The difference was the pool manager's URL handling, urllib3's
request and response objects, and the kubeconfig loader rebuilding the client's
configuration on every call that read the token. At ~100 binds/s on two vCPUs that is
about 3 % of the machine.

What this keeps from the client's configuration: the API server's URL (with any path
prefix), the TLS trust (CA file or data, or verification off), the client certificate,
and the bearer token, read through the client's own refresh hook at most every
``TOKEN_REFRESH_S`` and at once after a 401. A configuration it does not reproduce (a
proxy, a TLS server name or hostname assertion of its own, socket options, urllib3
retries) keeps the client's pool: ``KeepAlive.of(configuration)`` is None for it.

Connecting is bounded by ``timeout_s``; the POST's answer is waited for as the client's
pool waits for it (no timeout). One connection per thread (the bind threads), reused
while the server keeps it open; an idle connection the server closed is noticed before
it is used (as urllib3 does), and any transport failure drops the connection and raises
``ConnectionError``, which the bind path's retry treats as transient.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from extender.wire.clock import Clock, SystemClock

TOKEN_REFRESH_S = 10.0  # the in-cluster loader itself re-reads its token file each minute


@dataclass(frozen=True)
class Reply:
    status: int
    reason: str
    data: bytes


@dataclass(frozen=True)
class _Trust:
    """What a TLS context is built from: rebuilt when the client's refresh changes it."""

    verify: bool
    ca_file: str | None
    ca_data: str | bytes | None
    cert_file: str | None
    key_file: str | None

    @classmethod
    def of(cls, cfg: Any) -> _Trust:
        return cls(cfg.verify_ssl, cfg.ssl_ca_cert, cfg.ca_cert_data, cfg.cert_file, cfg.key_file)

    def context(self) -> ssl.SSLContext:
        ca_data = self.ca_data.decode() if isinstance(self.ca_data, bytes) else self.ca_data
        ctx = ssl.create_default_context(cafile=self.ca_file, cadata=ca_data)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


class KeepAlive:
    """POSTs to one API server over one kept-alive connection per thread."""

    def __init__(self, cfg: Any, timeout_s: float, clock: Clock | None = None) -> None:
        url = urlsplit(cfg.host)
        self._cfg, self._timeout_s = cfg, timeout_s
        self._clock = clock or SystemClock()
        self._tls = url.scheme == "https"
        self._host = url.hostname or ""
        self._port = url.port or (443 if self._tls else 80)
        self._prefix = url.path.rstrip("/")
        self._lock = threading.Lock()
        self._local = threading.local()
        self._auth: dict[str, str] = {}
        self._auth_at = -float("inf")
        self._trust = _Trust.of(cfg)
        self._context = self._trust.context() if self._tls else None
        self._generation = 0  # bumped when the TLS context changes: older connections go

    @classmethod
    def of(cls, cfg: Any, timeout_s: float) -> KeepAlive | None:
        """For a configuration this reproduces exactly, else None (use the client)."""
        plain = (
            urlsplit(cfg.host).scheme in ("https", "http")
            and not cfg.proxy
            and not cfg.tls_server_name
            and cfg.assert_hostname is None
            and cfg.socket_options is None
            and not getattr(cfg, "keep_alive", False)
            and cfg.retries is None
        )
        return cls(cfg, timeout_s) if plain else None

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> Reply:
        """POST ``body``; a 401 refreshes the token and tries once more."""
        reply = self._post(path, body, headers, refresh=False)
        if reply.status == 401:
            reply = self._post(path, body, headers, refresh=True)
        return reply

    def _post(self, path: str, body: bytes, headers: dict[str, str], refresh: bool) -> Reply:
        sent = {**headers, **self._token(refresh)}
        conn = self._connection()
        try:
            conn.request("POST", self._prefix + path, body, sent)
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as e:
            raise self._lost(e) from e
        if response.will_close:
            self._drop()
        return Reply(response.status, response.reason, data)

    def _token(self, refresh: bool) -> dict[str, str]:
        """The auth header, through the client's refresh hook when due (or asked)."""
        with self._lock:
            now = self._clock.now()
            if refresh or now - self._auth_at >= TOKEN_REFRESH_S:
                token = self._cfg.auth_settings().get("BearerToken")
                self._auth = {token["key"]: token["value"]} if token else {}
                self._auth_at = now
                trust = _Trust.of(self._cfg)  # the hook may have rotated the client cert
                if self._tls and trust != self._trust:
                    self._trust, self._context = trust, trust.context()
                    self._generation += 1
            return self._auth

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and (
            self._local.generation != self._generation or _closed_by_server(conn)
        ):
            self._drop()
            conn = None
        if conn is None:
            if self._tls:
                conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout_s, context=self._context
                )
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
            self._local.conn, self._local.generation = conn, self._generation
        if conn.sock is None:
            try:
                conn.connect()  # bounded: nothing has been sent yet
            except OSError as e:
                raise self._lost(e) from e
            # then unbounded, as the client's pool is: a POST whose answer is given up
            # on may still have bound the pod, and the bind would be answered as failed
            sock: Any = conn.sock
            sock.settimeout(None)
        return conn

    def _lost(self, error: Exception) -> ConnectionError:
        """The thread's connection is dropped; the error names the server."""
        self._drop()
        return ConnectionError(f"API server {self._host}:{self._port}: {error!r}")

    def _drop(self) -> None:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()


def _closed_by_server(conn: http.client.HTTPConnection) -> bool:
    """An idle kept-alive socket that is readable has been closed (or sent something
    unasked): it cannot carry the next request."""
    sock = conn.sock
    if sock is None:
        return False  # not connected yet
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
