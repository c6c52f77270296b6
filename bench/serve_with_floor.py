"""The extender as ``headroom serve`` runs it, plus ``POST /floor``: a trivial endpoint on
the same server that reads the same body and answers without computing anything -- the
latency floor that filter/prioritize are compared against. Benchmark use only.

    serve_with_floor.py PORT DB [--sections] [--keep-replies] [--kubeconfig PATH]

``--keep-replies`` keeps the last reply of /filter and of /prioritize, and the floor
answers ``X-Reply-Like: filter|prioritize`` with those very bytes (a client that decodes
replies into typed results, as kube-scheduler does, then decodes the same for both).

``--sections`` times the scheduling path's calls from inside (``SECTIONS``) and each
whole request per route, and serves them at ``GET /sections`` (bench/sections.py)."""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import Request
from fastapi.responses import Response

import extender.scheduling.asks
import extender.scheduling.evaluate
import extender.scheduling.plans
import extender.scheduling.replies
import extender.scoring.fragmentation
from extender.codec.codec import Codec
from extender.codec.namebytes import NameIndex
from extender.codec.namelists import ArgsDecoder, NameList
from extender.core.runtime import tune_runtime
from extender.scheduling.asks import Asks
from extender.scheduling.cycle import Cycle
from extender.scheduling.evaluate import Evaluator
from extender.scheduling.plans import Plans
from extender.scheduling.service import SchedulingService
from extender.settings import Settings
from extender.state.columns import NodeColumns
from extender.wire.logs import setup_logging
from extender.wiring import build

SECTIONS: list[tuple[Any, str]] = [
    # the codec: the body into arguments, the answer into bytes
    (Codec, "decode_args"),
    (ArgsDecoder, "decode"),
    (ArgsDecoder, "pod"),
    (ArgsDecoder, "names"),
    (NameIndex, "read_ids"),
    (NameIndex, "fingerprint"),
    (ArgsDecoder, "expect"),
    (NameList, "json"),
    (Codec, "encode_filter"),
    (Codec, "encode_priorities"),
    # the service
    (SchedulingService, "filter"),
    (SchedulingService, "prioritize"),
    (Asks, "remember"),
    (Cycle, "_plan"),
    (Cycle, "_passed_by"),
    (Plans, "parent"),
    # a plan brought up to date after a round of reports (churn), and the filter's answer
    (extender.scheduling.plans, "_patch"),
    (extender.scheduling.plans, "_merge"),
    (Cycle, "_changed"),
    (Evaluator, "names"),
    (NodeColumns, "read"),
    (extender.scheduling.evaluate, "evaluate_rows"),
    (extender.scoring.fragmentation, "greedy_scores"),
    (extender.scheduling.replies, "filter_reply"),
    (extender.scheduling.replies, "narrowed"),
    (extender.scheduling.replies, "priority_array"),
    (extender.scheduling.asks, "demand_of"),
    (extender.scheduling.asks, "pod_ref"),
    # a pod of a new shape: a plan evaluated afresh, its answers made once
    (Plans, "_evaluated"),
    (extender.scheduling.replies, "passing_priorities"),
    # after an agent report: its handling, and the plans brought up to date after it
    (SchedulingService, "report"),
    (SchedulingService, "refresh"),
]
ROUTES = {
    "/filter": "filter",
    "/prioritize": "prioritize",
    "/floor": "floor",
    "/floor-parse": "floor",
    "/v1/reports": "report",
}


class Sections:
    """Timers around ``SECTIONS`` and around each request, by route."""

    def __init__(self, app: Any) -> None:
        self.app, self.route = app, "other"
        self.times: defaultdict[str, list[float]] = defaultdict(list)
        for owner, name in SECTIONS:
            inner = getattr(owner, name, None)
            if inner is None:  # the code moved on: say so, time the rest
                print(
                    f"sections: {getattr(owner, '__name__', owner)}.{name} is gone", file=sys.stderr
                )
                continue
            setattr(owner, name, self._timed(inner, name))

    def _timed(self, inner: Callable[..., Any], name: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.times[f"{self.route} {name}"].append(time.perf_counter() - t)

        return timed

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.route = ROUTES.get(scope["path"], "other")
        t = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            self.times[f"{self.route} whole request"].append(time.perf_counter() - t)

    def take(self) -> dict[str, tuple[int, float, float]]:
        """(calls, p50 µs, p99 µs) per route and section since the last take."""
        out = {}
        for key, spent in sorted(self.times.items()):
            if not key.startswith("other"):
                ranked = sorted(spent)
                out[key] = (
                    len(spent),
                    statistics.median(spent) * 1e6,
                    ranked[int(0.99 * (len(spent) - 1))] * 1e6,
                )
        self.times.clear()
        return out


class KeepReplies:
    """The last reply body sent on each scheduler verb (``--keep-replies``)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.last: dict[str, bytes] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        verb = scope.get("path", "")[1:] if scope["type"] == "http" else ""
        if verb not in ("filter", "prioritize"):
            await self.app(scope, receive, send)
            return
        parts: list[bytes] = []

        async def kept(message: Any) -> None:
            if message["type"] == "http.response.body":
                parts.append(message.get("body", b""))
                if not message.get("more_body"):
                    self.last[verb] = b"".join(parts)
            await send(message)

        await self.app(scope, receive, kept)


def main() -> None:
    port, db = int(sys.argv[1]), sys.argv[2]
    setup_logging("error")  # the simulated agents' pods have no grants: leak warnings galore
    flags = sys.argv[3:]
    kubeconfig = flags[flags.index("--kubeconfig") + 1] if "--kubeconfig" in flags else None
    built = build(
        Settings(db=db, allow_unauthenticated_reports=True, stale_after=3600, kubeconfig=kubeconfig)
    )

    limits = built.app.state.edge.route_limits  # the floors take the bodies filter takes
    limits["/floor"] = limits["/floor-parse"] = limits["/settle"] = limits["/filter"]
    replies: dict[int, bytes] = {}
    keep = KeepReplies(built.app) if "--keep-replies" in sys.argv[3:] else None

    @built.app.post("/floor")
    async def floor(request: Request) -> Response:
        """Reads the body; answers ``{}``, or with ``X-Reply-Bytes: N`` a prepared JSON
        string of N bytes (the same transport back as the reply it is compared with), or
        with ``X-Reply-Like: VERB`` the last reply of that verb (``--keep-replies``)."""
        await request.body()
        like = request.headers.get("x-reply-like")
        if keep is not None and like in keep.last:
            return Response(keep.last[like], media_type="application/json")
        size = int(request.headers.get("x-reply-bytes", "2"))
        if size not in replies:
            replies[size] = b"{}" if size <= 2 else b'"' + b"x" * (size - 2) + b'"'
        return Response(replies[size], media_type="application/json")

    @built.app.post("/floor-parse")
    async def floor_parse(request: Request) -> Response:
        """The bare FastAPI app of issue 28's target: it only parses the body, as a
        FastAPI route with a ``dict`` body does (``request.json()``), and answers as
        ``/floor`` does."""
        await request.json()
        return await floor(request)

    @built.app.post("/settle")
    def settle() -> dict[str, int]:
        """Waits until the ledger writer has written what the reports so far queued (5,000
        reports queue a minute of writes, which would otherwise run beside the timed
        requests); answers how many writes it dropped."""
        built.service.writer.flush(timeout=120)
        return {"dropped": built.service.writer.dropped}

    app: Any = built.app if keep is None else keep
    if "--sections" in sys.argv[3:]:
        app = sections = Sections(app)
        built.app.get("/sections")(sections.take)

    tune_runtime()  # as ``headroom serve`` does before serving
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
