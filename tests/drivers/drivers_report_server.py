"""A real HTTP server on 127.0.0.1 standing in for the extender's /v1/reports.

(A uniquely named module rather than conftest, so test files can import its types
without depending on which rootless conftest.py pytest imported last.)
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec

from extender.wire.report import NodeReport, PodGrant, ReportResponse, report_decoder


@dataclass
class Received:
    path: str
    authorization: str | None
    report: NodeReport


@dataclass
class ReportServer:
    """Records every request; answers with ``statuses`` in turn (the last one repeats)."""

    statuses: list[int] = field(default_factory=lambda: [200])
    delay_s: float = 0.0
    grants: list[PodGrant] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_status(self) -> int:
        with self.lock:
            n = len(self.received)
        return self.statuses[min(n - 1, len(self.statuses) - 1)]

    def wait_for(self, count: int, timeout_s: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.received) >= count:
                    return True
            time.sleep(0.01)
        return False


def _handler(state: ReportServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like the agent's client expects

        def do_POST(self) -> None:
            with state.lock:
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                report = report_decoder.decode(body)
                with state.lock:
                    state.received.append(
                        Received(self.path, self.headers.get("Authorization"), report)
                    )
                if state.delay_s:
                    time.sleep(state.delay_s)
                status = state.next_status()
                if status == 200:
                    reply = ReportResponse(
                        accepted=True,
                        node=report.node,
                        received_at=time.time(),
                        grants=state.grants,
                    )
                    payload = msgspec.json.encode(reply)
                else:
                    payload = b'{"error":"try later"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            finally:
                with state.lock:
                    state.in_flight -= 1

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def start_report_server() -> tuple[ReportServer, ThreadingHTTPServer]:
    state = ReportServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    return state, server


def free_url() -> str:
    """A URL on which nothing listens (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
