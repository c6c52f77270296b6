"""The extender as ``headroom serve`` runs it, plus ``POST /floor``: a trivial endpoint on
the same server that reads the same body and answers without computing anything -- the
latency floor that filter/prioritize are compared against. Benchmark use only."""

from __future__ import annotations

import sys

import uvicorn
from fastapi import Request
from fastapi.responses import Response

from extender.app import build
from extender.logs import setup_logging
from extender.runtime import tune_runtime
from extender.settings import Settings


def main() -> None:
    port, db = int(sys.argv[1]), sys.argv[2]
    setup_logging("error")  # the simulated agents' pods have no grants: leak warnings galore
    built = build(Settings(db=db, allow_unauthenticated_reports=True, stale_after=3600))

    replies: dict[int, bytes] = {}

    @built.app.post("/floor")
    async def floor(request: Request) -> Response:
        """Reads the body; answers ``{}``, or with ``X-Reply-Bytes: N`` a prepared JSON
        string of N bytes (the same transport back as the reply it is compared with)."""
        await request.body()
        size = int(request.headers.get("x-reply-bytes", "2"))
        if size not in replies:
            replies[size] = b"{}" if size <= 2 else b'"' + b"x" * (size - 2) + b'"'
        return Response(replies[size], media_type="application/json")

    tune_runtime()  # as ``headroom serve`` does before serving
    uvicorn.run(built.app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
