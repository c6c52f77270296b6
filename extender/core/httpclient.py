"""The one HTTP client factory: keep-alive, bounded timeouts, optional bearer token.

Every headroom component that calls another over HTTP (agent -> extender, simulate ->
extender, benchmarks) builds its client here so timeouts and limits are set once.
"""

from __future__ import annotations

import httpx

DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=3.0)


def make_client(
    base_url: str, token: str | None = None, timeout: httpx.Timeout | float = DEFAULT_TIMEOUT
) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(
        base_url=base_url,
        headers=headers,
        timeout=timeout,
        limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
    )
