"""Start-up warm-up: the scheduling path run once before the listeners open, so that the
first filter kube-scheduler sends after a start or a failover does not pay for what the
process does only once.

Profiled (docs/BENCHMARKS.md, "Cold start"), the first filter paid, beyond what later
ones do: Starlette building the app's middleware stack on its first request (and, before
the verbs bypassed FastAPI's router, FastAPI reading each endpoint's source file), NumPy's
first calls of the decoding and FGD kernels, and the heap's first growth to a request's
working set. None of that is state; all of it belongs to the process.

Three steps, none changing anything a user sees (the service's inventory, workload mix,
plans, codec, ledger, metrics; ``tests/test_warmup.py`` checks):

1. the real app's ``/filter`` and ``/prioritize`` are called with an empty body: through
   the very middleware and handlers kube-scheduler will call (the stack is built),
   refused with a 400 before anything is decoded;
2. a scratch app (``create_app`` over a scratch ``SchedulingService``: the same policy,
   config and clock, an empty inventory pricing alike, the ledger object never written)
   learns ``NODES`` synthetic nodes as reports teach them (in another order than its
   list names them, as a fleet's agents report) and answers a filter and a prioritize
   of the shape kube-scheduler sends; then it is dropped;
3. the heap grown once to a large request's working set (``HEAP_BYTES``), every page
   written: with the trim threshold ``tune_runtime`` sets the pages stay, and the first
   5,000-node filter's temporaries take them instead of faulting in fresh ones.

Requests carry ``WARM_UP`` in their ASGI scope, which nothing on the network can set, and
the scheduler routes leave them out of the latency histogram.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
from fastapi import FastAPI

from extender.http.app import create_app
from extender.http.scheduler import WARM_UP
from extender.scheduling.service import SchedulingService
from extender.wire.report import GpuReport, NodeReport

log = logging.getLogger("headroom.warmup")
NODES = 512  # enough for every kernel's paths; report intake is not what is warmed
# a 5,000-node FGD pass holds a few MB of temporaries at once; the rest is headroom
HEAP_BYTES = 16 << 20
GPUS = 4
GPU_MIB = 24_576
POD = {
    "metadata": {
        "name": "warm-up",
        "namespace": "headroom-warm-up",
        "uid": "headroom-warm-up",
        "annotations": {"headroom.dev/gpu-memory": "4096Mi"},
    },
    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}


async def warm_up(app: FastAPI, service: SchedulingService, nodes: int = NODES) -> None:
    """The three steps; a failure is logged and start-up goes on (it only costs time
    later). Call it after ``tune_runtime``, which keeps the heap's pages."""
    started = time.perf_counter()
    try:
        for verb in ("/filter", "/prioritize"):
            await call(app, verb, b"")
        await _scratch(service, nodes)
    except Exception:
        log.exception("warm-up failed; the first requests will pay for it")
    gc.collect()  # the scratch app's cycles: freed now, not inside a request
    _grow_heap(HEAP_BYTES)
    log.info("warmed up", extra={"seconds": round(time.perf_counter() - started, 3)})


def _grow_heap(size: int) -> None:
    """``size`` bytes of heap written and freed, in blocks each under the mmap threshold
    (so malloc takes them from the heap, which keeps them once freed)."""
    block = 1 << 20
    blocks = [np.ones(block // 8) for _ in range(size // block)]
    del blocks


async def _scratch(service: SchedulingService, nodes: int) -> None:
    scratch = SchedulingService(
        service.inventory.empty_like(),
        service.ledger,  # never written: no report, bind or release goes through here
        service.binder,
        service.policy,
        service.clock,
        service.config,
    )
    scratch.quiet()  # no metric or Event for the synthetic pod
    try:
        app = create_app(scratch)
        names = [f"headroom-warm-up-{i:05d}" for i in range(nodes)]
        now = service.clock.now()
        # reported in another order than the list's, as a fleet's agents are: its rows are
        # read through the paths that put them in row order and back, as a real list's are
        for i in reversed(range(nodes)):
            scratch.inventory.apply_report(_report(names[i], i, now), now)
            app.state.learn(names[i])
        args = {"Pod": POD, "Nodes": None, "NodeNames": names}
        status, reply = await call(app, "/filter", msgspec.json.encode(args))
        passed = msgspec.json.decode(reply).get("NodeNames") if status == 200 else None
        args["NodeNames"] = passed or []
        await call(app, "/prioritize", msgspec.json.encode(args))
    finally:
        scratch.writer.close()


def _report(name: str, seed: int, now: float) -> NodeReport:
    """A node of ``GPUS`` GPUs, each with a different amount in use."""
    gpus = [
        GpuReport(
            uuid=f"GPU-{name}-{k}",
            index=k,
            model="warm-up",
            memory_total_mib=GPU_MIB,
            memory_used_mib=1024 * ((seed + k) % 8),
        )
        for k in range(GPUS)
    ]
    return NodeReport(node=name, sampled_at=now, gpus=gpus)


async def call(app: Callable[..., Any], path: str, body: bytes) -> tuple[int, bytes]:
    """One POST through ``app`` from loopback, marked ``WARM_UP``: (status, body)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
        WARM_UP: True,
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    status, chunks = 0, []

    async def receive() -> dict[str, Any]:
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)
