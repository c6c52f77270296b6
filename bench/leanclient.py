"""A minimal HTTP/1.1 keep-alive client over one socket, for bench/latency.py.

httpx spends ~0.3-0.4 ms of Python on each request, more than the extender's floor
route: with it the floor measures mostly the client, and every ratio to the floor is
pulled towards 1. kube-scheduler's Go client spends a fraction of that. This one writes
the request and reads ``Content-Length`` bytes back, nothing else (no redirects, no
chunked replies: the extender sends neither), so the floor measured with it is closer
to what the scheduler sees.
"""

from __future__ import annotations

import json
import socket
from typing import Any


class LeanResponse:
    def __init__(self, status_code: int, content: bytes) -> None:
        self.status_code = status_code
        self.content = content

    def json(self) -> Any:
        return json.loads(self.content)

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise RuntimeError(f"HTTP {self.status_code}: {self.content[:200]!r}")


class LeanClient:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self._sock = socket.create_connection((host, port))
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._pending = b""

    def post(
        self, path: str, content: bytes, headers: dict[str, str] | None = None
    ) -> LeanResponse:
        lines = [f"POST {path} HTTP/1.1", "Host: bench", f"Content-Length: {len(content)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self._sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + content)
        head, body = self._read_head()
        status = int(head.split(b" ", 2)[1])
        length = _content_length(head)
        while len(body) < length:
            body += self._recv()
        self._pending = body[length:]
        return LeanResponse(status, body[:length])

    def _read_head(self) -> tuple[bytes, bytes]:
        data = self._pending
        while b"\r\n\r\n" not in data:
            data += self._recv()
        head, _, rest = data.partition(b"\r\n\r\n")
        return head, rest

    def _recv(self) -> bytes:
        chunk = self._sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def close(self) -> None:
        self._sock.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise ValueError("reply without Content-Length")
