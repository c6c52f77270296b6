"""``/metrics`` and ``/healthz`` for the agent, on a small threaded HTTP server.

The standard-library server is enough for one scrape every few seconds and keeps the
DaemonSet image free of an ASGI stack. ``/healthz`` reflects sampling only: an
unreachable extender must not make the kubelet restart every agent in the cluster.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


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
    ) -> None:
        self._server = ThreadingHTTPServer((host, port), _handler(registry, healthy))
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
