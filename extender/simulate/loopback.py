"""The simulator's HTTP client: one keep-alive HTTP/1.1 connection to the extender.

The simulated agents and kube-scheduler talk to a real extender over a real socket, a
few thousand requests per policy. ``httpx`` spent about half a millisecond of Python
per request building URLs, headers and cookies (a py-spy profile of ``headroom
simulate``: a quarter of the run); the standard library's ``http.client`` on one reused
connection does the same exchange in a fraction of that. Production clients (the agent,
the benchmarks) keep ``extender.core.httpclient``.
"""

from __future__ import annotations

import http.client
from urllib.parse import urlencode, urlsplit

from extender.simulate import SimulationFailed

TIMEOUT_S = 30.0


class ExtenderError(SimulationFailed):
    """The extender answered an error or could not be reached: the run cannot go on."""


class LoopbackClient:
    """``post(path, body) -> response body``; raises ``ExtenderError`` on any non-2xx."""

    def __init__(self, base_url: str, token: str) -> None:
        url = urlsplit(base_url)
        self._conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, TIMEOUT_S)
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(self, path: str, body: bytes = b"", params: dict[str, str] | None = None) -> bytes:
        target = f"{path}?{urlencode(params)}" if params else path
        try:
            self._conn.request("POST", target, body, self._headers)
            response = self._conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as e:
            self._conn.close()
            raise ExtenderError(f"POST {path}: {e}") from e
        if not 200 <= response.status < 300:
            text = data[:300].decode("utf-8", "replace")
            raise ExtenderError(f"POST {path}: HTTP {response.status}: {text}")
        return data

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> LoopbackClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
