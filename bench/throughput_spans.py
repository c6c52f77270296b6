"""``headroom serve`` with timed spans on its scheduling path, for bench/throughput.py.

Run as ``python -m bench.throughput_spans serve ARGS...``: the same ``extender.cli`` main,
after wrapping (from the outside, no extender code changed) the calls a pod's filter,
prioritize and bind pass through. Measured, not sampled: a sampling profiler sees where
CPU goes but not how long a bind *waits* (bind pool queue, SQLite's busy-wait for the
write lock, the ledger deadline pool, the API server), and waiting is what issue 29 asks
about. Each span costs two ``perf_counter`` calls and a list append. The scheduling cycle's
requests (``/filter``, ``/prioritize``) are also split by what the event-loop thread did
meanwhile: on a CPU (``thread_time``), runnable but waiting for one (the kernel's
``schedstat``), or neither (the interpreter lock, ``select``): two small file reads each.

Spans (seconds, one list per name) stay in memory. ``SIGUSR2`` clears them (after the
agents' reports, before the timed run); ``SIGUSR1`` writes them as JSON to the file
named by ``HEADROOM_BENCH_SPANS``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

SPANS: dict[str, list[float]] = {}
COUNTS: dict[str, int] = {}
CYCLE_VERBS = ("/filter", "/prioritize")  # what kube-scheduler's scheduling cycle waits for
_where = threading.local()  # which binder call / ledger op a nested span belongs to


def record(name: str, seconds: float) -> None:
    SPANS.setdefault(name, []).append(seconds)


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wall time as ``name``, and the calling thread's CPU time meanwhile as
    ``name [CPU]`` (the ``CPU ms per pod`` column: what the span costs the machine)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0, cpu0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            record(name, time.perf_counter() - t0)
            record(f"{name} [CPU]", time.thread_time() - cpu0)

    return wrapper


def labelled(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``timed``, and HTTP round trips made inside count as ``name + " http"``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _where.name = name
        try:
            return timed(name, fn)(*args, **kwargs)
        finally:
            _where.name = None

    return wrapper


class TimedPool(ThreadPoolExecutor):
    """The bind pool, timing each job's wait for a free thread and its run."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        if not (self._thread_name_prefix or "").startswith("bind"):
            return super().submit(fn, *args, **kwargs)
        queued = time.perf_counter()

        def job() -> Any:
            started, cpu0 = time.perf_counter(), time.thread_time()
            record("bind pool: wait for a thread", started - queued)
            try:
                return fn(*args, **kwargs)
            finally:
                name = "bind pool: job (decode, service.bind, gc)"
                record(name, time.perf_counter() - started)
                record(f"{name} [CPU]", time.thread_time() - cpu0)

        return super().submit(job)


class HttpTimer:
    """ASGI middleware: request start to the last body byte sent (before background
    tasks such as the plan refresh a bind schedules, which are timed on their own), and
    of that, request start to the whole body received (``: body read``): a request whose
    body comes in several segments waits for the sender between them."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0, cpu0, queued0 = time.perf_counter(), time.thread_time(), _run_queue_s()
        name = f"http {scope['path']}"
        done = read = False

        async def timed_receive() -> Any:
            nonlocal read
            message = await receive()
            if not read and not message.get("more_body"):
                read = True
                record(f"{name}: body read", time.perf_counter() - t0)
            return message

        async def timed_send(message: Any) -> None:
            nonlocal done
            await send(message)
            if (
                message["type"] == "http.response.body"
                and not message.get("more_body")
                and not done
            ):
                done = True
                wall = time.perf_counter() - t0
                record(name, wall)
                if scope["path"] not in CYCLE_VERBS:
                    return
                # the loop thread over the same span (other requests it served meanwhile
                # included): running, runnable but waiting for a CPU, and neither (the
                # interpreter lock, idle in select)
                cpu, queued = time.thread_time() - cpu0, _run_queue_s() - queued0
                record(f"{name}: loop thread on a CPU", cpu)
                record(f"{name}: loop thread waiting for a CPU", queued)
                record(f"{name}: loop thread off CPU (GIL, select)", max(0.0, wall - cpu - queued))

        await self.app(scope, timed_receive, timed_send)


def _run_queue_s() -> float:
    """Seconds the calling thread has spent runnable but waiting for a CPU (schedstat)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _ledger_op(op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Names the ledger operation a SQLite transaction belongs to (the outermost call names it)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        outer = getattr(_where, "op", None)
        _where.op = outer or op
        try:
            return fn(*args, **kwargs)
        finally:
            _where.op = outer

    return wrapper


def _sqlite_write(orig: Callable[..., Any]) -> Callable[..., Any]:
    """SqliteDialect.write split into BEGIN IMMEDIATE (waiting for the file's write lock,
    SQLite sleeping between retries), the statements, and COMMIT (fsync: synchronous=FULL)."""

    @contextlib.contextmanager
    def write(self: Any) -> Iterator[Any]:
        op = getattr(_where, "op", None) or "other"
        t0 = time.perf_counter()
        cm = orig(self)
        conn = cm.__enter__()
        t1 = time.perf_counter()
        record(f"sqlite BEGIN IMMEDIATE (write lock wait) [{op}]", t1 - t0)
        try:
            yield conn
        except BaseException:
            if not cm.__exit__(*sys.exc_info()):
                raise
            return
        t2 = time.perf_counter()
        record(f"sqlite statements (rows, hash chain) [{op}]", t2 - t1)
        cm.__exit__(None, None, None)
        record(f"sqlite COMMIT (fsync) [{op}]", time.perf_counter() - t2)

    return write


def install() -> None:
    """Wrap the scheduling path. Imports here: the patched names must be the ones the
    extender looks up at call time (module globals and class attributes)."""
    import urllib3.connectionpool
    from kubernetes.client import rest

    import extender.http.app as app_mod
    import extender.http.scheduler as scheduler_mod
    import extender.scheduling.plans as plans_mod
    import extender.wiring as wiring
    from extender.kube.binder import KubeBinder
    from extender.ledger.sql import SqlLedger
    from extender.ledger.sqlite import SqliteDialect
    from extender.scheduling.bind import Binding
    from extender.scheduling.deadline import Deadline
    from extender.scheduling.inflight import InFlight
    from extender.scheduling.service import SchedulingService as S

    app_mod.ThreadPoolExecutor = TimedPool  # type: ignore[misc]
    create_app = wiring.create_app

    def create_timed_app(*args: Any, **kwargs: Any) -> Any:
        app = create_app(*args, **kwargs)
        app.add_middleware(HttpTimer)  # outermost: sees the whole request
        return app

    wiring.create_app = create_timed_app
    scheduler_mod.collect_due = timed("bind: collect_due (gc)", scheduler_mod.collect_due)
    S.filter = timed("service.filter", S.filter)  # type: ignore[method-assign]
    S.prioritize = timed("service.prioritize", S.prioritize)  # type: ignore[method-assign]
    P = plans_mod.Plans
    P._evaluated = timed("plans: a list evaluated afresh", P._evaluated)  # type: ignore[method-assign]
    S.refresh = timed("service.refresh (after each bind, event loop)", S.refresh)  # type: ignore[method-assign]
    Binding._decide = timed("bind: decide + reserve (inventory lock)", Binding._decide)  # type: ignore[method-assign]
    InFlight.enter = timed("bind: in-flight turn", InFlight.enter)  # type: ignore[method-assign]
    bind = timed("service.bind", S.bind)

    def counted_bind(self: Any, args: Any) -> Any:
        result = bind(self, args)
        key = "bind errors" if result.Error else "binds ok"
        COUNTS[key] = COUNTS.get(key, 0) + 1
        if result.Error and COUNTS[key] <= 5:
            COUNTS[f"error: {result.Error[:160]}"] = 1
        return result

    S.bind = counted_bind  # type: ignore[method-assign]
    call = Deadline.call

    def deadline_call(self: Any, fn: Callable[..., Any], *args: Any) -> Any:
        name = f"ledger {getattr(fn, '__name__', 'call')} (bind thread waits)"
        return timed(name, call)(self, fn, *args)

    Deadline.call = deadline_call  # type: ignore[method-assign]
    for op in ("record_decision", "mark_bound", "fail_bind"):
        setattr(SqlLedger, op, timed(f"ledger {op} (in the ledger thread)", getattr(SqlLedger, op)))
    # the bound status queued to ride in the next transaction (ledger/group.py)
    SqlLedger.mark_bound_later = timed(  # type: ignore[method-assign]
        "ledger mark_bound_later (bind thread, not waited for)", SqlLedger.mark_bound_later
    )
    for op in [n for n in vars(SqlLedger) if not n.startswith("_")]:
        if callable(getattr(SqlLedger, op)):
            setattr(SqlLedger, op, _ledger_op(op, getattr(SqlLedger, op)))
    SqliteDialect.write = _sqlite_write(SqliteDialect.write)  # type: ignore[method-assign]
    KubeBinder._bind = labelled("kube: Binding POST (with the grant)", KubeBinder._bind)  # type: ignore[method-assign]
    request = rest.RESTClientObject.request

    def http(self: Any, *args: Any, **kwargs: Any) -> Any:
        where = getattr(_where, "name", None)
        if where is None:
            return request(self, *args, **kwargs)
        return timed(f"{where}: HTTP round trip (urllib3)", request)(self, *args, **kwargs)

    rest.RESTClientObject.request = http  # type: ignore[method-assign]
    post = KubeBinder._post  # the Binding's own POST, through the client's pool

    def timed_post(self: Any, *args: Any, **kwargs: Any) -> Any:
        where = getattr(_where, "name", None) or "kube: POST"
        return timed(f"{where}: HTTP round trip (urllib3)", post)(self, *args, **kwargs)

    KubeBinder._post = timed_post  # type: ignore[method-assign]
    new_conn = urllib3.connectionpool.HTTPSConnectionPool._new_conn

    def counted_conn(self: Any) -> Any:
        # more binds at once than the client's pool keeps (cpu_count x 5): each extra one
        # opens a connection, with its TLS handshake, and drops it after the call
        key = f"HTTPS connections opened ({getattr(_where, 'name', None) or 'other kube calls'})"
        COUNTS[key] = COUNTS.get(key, 0) + 1
        return new_conn(self)

    urllib3.connectionpool.HTTPSConnectionPool._new_conn = counted_conn  # type: ignore[method-assign]


def clear() -> None:
    SPANS.clear()
    COUNTS.clear()


def dump(path: str) -> None:
    with open(path + ".tmp", "w") as f:
        spans = {name: list(values) for name, values in list(SPANS.items())}
        json.dump({"spans": spans, "counts": dict(COUNTS)}, f)
    os.replace(path + ".tmp", path)


def main(argv: list[str]) -> int:
    install()
    path = os.environ.get("HEADROOM_BENCH_SPANS", "spans.json")
    signal.signal(signal.SIGUSR1, lambda *_: dump(path))
    signal.signal(signal.SIGUSR2, lambda *_: clear())
    from extender.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
