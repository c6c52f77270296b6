"""Liveness, readiness and metrics: what kubelet and Prometheus ask."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from extender.ledger.metrics import metrics_response

READY_PROBE_S = 2.0  # a readiness probe's own timeout is usually 1-5 s


def health_router(ping: Callable[[], object], ready: Callable[[], bool]) -> APIRouter:
    """``ping``: asks the ledger (raises when it cannot answer); ``ready``: synced with
    the cluster."""
    router = APIRouter()
    probe_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ready-probe")

    @router.get("/metrics", summary="Prometheus metrics")
    def metrics() -> Response:
        body, content_type = metrics_response()
        return Response(body, media_type=content_type)

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness, on the event loop: it answers whatever the ledger or binds are doing."""
        return {"status": "ok"}

    @router.get("/readyz")
    async def readyz() -> Response:
        """Readiness: synced with the cluster and the ledger answering. The ledger is asked
        in a thread of its own, bounded, so a stuck database makes this say so in time."""
        if not ready():
            return JSONResponse({"status": "not ready", "reason": "not synced"}, 503)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.run_in_executor(probe_pool, ping), READY_PROBE_S)
        except Exception as e:  # timeout, LedgerUnavailable
            reason = f"ledger unavailable: {str(e) or type(e).__name__}"
            return JSONResponse({"status": "not ready", "reason": reason[:300]}, 503)
        return JSONResponse({"status": "ready"})

    return router
