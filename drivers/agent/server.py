"""``/metrics`` and ``/healthz`` for the agent, on a small threaded HTTP server.

The standard-library server is enough for one scrape every few seconds and keeps the
DaemonSet image free of an ASGI stack. ``/healthz`` reflects sampling only: an
unreachable extender must not make the kubelet restart every agent in the cluster.

With a ``CertReloader`` the server speaks TLS only (certificate reloaded when its files
change). The handshake runs in the connection's own thread, not in the accept loop, so
a client that connects and stalls cannot block other scrapes.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from extender.wire.tls import CertReloader

HANDSHAKE_TIMEOUT_S = 10.0


class _TlsServer(ThreadingHTTPServer):
    reloader: CertReloader

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        # handshake on first read, in the handler thread
        wrapped = self.reloader.context.wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        )
        return wrapped, addr

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            request.do_handshake()
        except (OSError, ValueError):
            return  # not TLS, or gave up: nothing to answer
        super().finish_request(request, client_address)


def _handler(
    registry: CollectorRegistry, healthy: Callable[[], bool]
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                ok = healthy()
                self._reply(200 if ok else 503, b"ok\n" if ok else b"no recent sample\n")
            else:
                self._reply(404, b"not found\n")

        def _reply(
            self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8"
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Scrapes every few seconds would flood the logs; stay quiet."""

    return Handler


class MetricsServer:
    """Serve in a daemon thread; ``port`` is the bound port (useful with port 0)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        healthy: Callable[[], bool],
        port: int,
        host: str = "0.0.0.0",
        tls: CertReloader | None = None,
    ) -> None:
        handler = _handler(registry, healthy)
        if tls is not None:
            server = _TlsServer((host, port), handler)
            server.reloader = tls
            self._server: ThreadingHTTPServer = server
        else:
            self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="agent-metrics", daemon=True
        )

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
