"""Wiring: Settings -> ledger, prices, inventory, binder, policy -> service -> ASGI app,
and the listeners that serve it (plain HTTP, and TLS for the webhook and remote API)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI

from extender.core.runtime import tune_runtime
from extender.http.app import create_app
from extender.http.auth import Authenticator, TokenFile
from extender.http.connections import (
    BACKLOG,
    ConnectionCap,
    connection_cap,
    guarded_protocol,
    quiet_accept_errors,
    raise_file_limit,
)
from extender.http.tokenreview import TokenReviewer
from extender.http.warmup import warm_up
from extender.http.webhook import WebhookPolicy
from extender.kube.binder import KubeBinder
from extender.kube.client import api_client
from extender.kube.events import EventRecorder
from extender.kube.sync import ClusterSync
from extender.ledger import open_ledger
from extender.ledger.metrics import attach_ledger
from extender.pricing import load_pricebook
from extender.scheduling.binder import Binder, InProcessBinder
from extender.scheduling.service import SchedulingService, ServiceConfig
from extender.scoring import Limits, Weights, policy_by_name
from extender.scoring.fragmentation import share_passes
from extender.settings import Settings
from extender.state.gauges import attach_nodes
from extender.state.inventory import Inventory
from extender.wire.clock import Clock, SystemClock
from extender.wire.tls import CertReloader, files_present

log = logging.getLogger("headroom.app")


@dataclass
class Built:
    service: SchedulingService
    app: FastAPI
    sync: ClusterSync | None = None


def build(settings: Settings, clock: Clock | None = None, binder: Binder | None = None) -> Built:
    """Standalone (in-process binder) unless a kubeconfig or in-cluster config is set."""
    clock = clock or SystemClock()
    share_passes(settings.scoring_helper)
    api = None
    if settings.kubeconfig or settings.in_cluster:
        api = api_client(settings.kubeconfig)
        binder = binder or KubeBinder(api)
    ledger = open_ledger(
        settings.db, clock, timeout_s=settings.ledger_timeout, ride_s=settings.ledger_ride_s
    )
    inventory = Inventory(load_pricebook(settings.price_file, settings.spot_discount))
    config = ServiceConfig(
        stale_after=settings.stale_after,
        limits=Limits(margin_mib=settings.margin_mib, idle_mib=settings.idle_mib),
        weights=Weights(policy=settings.policy_weight, cost=settings.cost_weight),
        narrow_epsilon=settings.narrow_epsilon if settings.narrowing else None,
        decide=settings.decide and settings.narrowing,
        refresh_shapes=settings.refresh_shapes,
        refresh_window=settings.refresh_window,
        plan_ahead=settings.plan_ahead,
        bind_wait=settings.bind_wait,
        ack_timeout=settings.ack_timeout,
        ledger_deadline=settings.ledger_timeout + 0.5,  # the database's own timeouts first
    )
    service = SchedulingService(
        inventory,
        ledger,
        binder or InProcessBinder(),
        policy_by_name(settings.policy),
        clock,
        config,
    )
    service.rebuild()
    attach_ledger(lambda: service.ledger, clock)
    attach_nodes(service.nodes)
    sync = None
    if api is not None:
        sync = ClusterSync(api, service)
        service.unplaceable_hooks.append(EventRecorder(api, clock).unplaceable)
        sync.start()
    app = create_app(
        service,
        max_body_bytes=settings.max_body_bytes,
        max_nodes=settings.max_nodes_per_request,
        max_bind_body_bytes=settings.max_bind_body_bytes,
        max_preempt_body_bytes=settings.max_preempt_body_bytes,
        body_budget_bytes=settings.body_budget_bytes,
        body_timeout_s=settings.body_timeout_s,
        scheduler_verbs=settings.scheduler_verbs,
        auth=authenticator(settings, api),
        # a missing file refuses every reader until it appears (an optional Secret)
        audit_token=(
            TokenFile(settings.audit_token_file, optional=True)
            if settings.audit_token_file
            else None
        ),
        ready=(lambda: sync.wait_synced(0)) if sync else (lambda: True),
        webhook=WebhookPolicy(
            mode=settings.webhook_mode,
            exempt_namespaces=frozenset(
                ns.strip() for ns in settings.webhook_exempt_namespaces.split(",") if ns.strip()
            ),
        ),
    )
    return Built(service, app, sync)


def authenticator(settings: Settings, api: object | None) -> Authenticator:
    """Shared token file and/or TokenReview of agent tokens (only with a cluster)."""
    shared = TokenFile(settings.agent_token_file) if settings.agent_token_file else None
    reviewer = None
    if settings.agent_token_audience:
        if api is None:
            log.warning(
                "agent token audience set but no cluster (standalone): agent "
                "ServiceAccount tokens cannot be reviewed; only the shared token works"
            )
        else:
            reviewer = TokenReviewer.for_api(
                api,  # type: ignore[arg-type]
                settings.agent_token_audience,
                settings.agent_service_account,
                ttl_s=settings.token_review_ttl_s,
                max_entries=settings.token_review_cache_size,
            )
    ways = []
    if shared is not None:
        ways.append(f"the shared token in {settings.agent_token_file}")
    if reviewer is not None:
        ways.append(f"ServiceAccount tokens of audience {settings.agent_token_audience!r}")
    if settings.allow_unauthenticated_reports:
        ways.append("no token at all (--allow-unauthenticated-reports)")
    if ways:  # once, at start: what an agent must present (never the token itself)
        log.info("agent reports are authenticated by " + " or ".join(ways))
    if shared is None and reviewer is None and not settings.allow_unauthenticated_reports:
        log.warning(
            "no agent can report: every POST /v1/reports will be refused (401) until the "
            "extender has --agent-token-file (and each agent --token-file with the same "
            "token), an agent token audience in a cluster, or --allow-unauthenticated-reports"
        )
    return Authenticator(shared, reviewer, settings.allow_unauthenticated_reports)


class _Server(uvicorn.Server):
    """uvicorn server whose signals are handled by ``serve`` for all listeners at once."""

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        return contextlib.nullcontext()


def _config(
    app: FastAPI, settings: Settings, port: int, cap: ConnectionCap | None = None
) -> uvicorn.Config:
    """Both listeners share ``cap`` (open connections) and the timeouts. No proxy
    headers: nothing sits in front, and the scheduler verbs trust a loopback peer."""
    cap = cap or ConnectionCap(connection_cap(settings.max_connections, raise_file_limit()))
    return uvicorn.Config(
        app,
        host=settings.host,
        port=port,
        log_level=settings.log_level,
        access_log=False,
        lifespan="off",
        proxy_headers=False,
        backlog=BACKLOG,
        timeout_keep_alive=max(1, round(settings.idle_timeout_s)),
        http=guarded_protocol(cap, settings.idle_timeout_s, settings.header_timeout_s),
    )


async def serve(built: Built, settings: Settings) -> None:
    """Serve plain HTTP on ``port`` and, when ``tls_port`` is set, the same app over TLS.

    The TLS listener waits for its certificate files (the Secret is optional in the
    manifests, so the pod may start before cert-manager has issued one) and then
    reloads them whenever they change. SIGTERM/SIGINT stop both listeners.
    """
    tune_runtime()
    await warm_up(built.app, built.service)  # before any listener: /healthz waits for it
    quiet_accept_errors()
    cap = ConnectionCap(connection_cap(settings.max_connections, raise_file_limit()))
    log.info(
        "HTTP edge",
        extra={
            "max_connections": cap.cap,
            "idle_timeout_s": settings.idle_timeout_s,
            "header_timeout_s": settings.header_timeout_s,
            "body_timeout_s": settings.body_timeout_s,
            "body_budget_bytes": built.app.state.edge.budget.limit,
            "scheduler_verbs": settings.scheduler_verbs,
            "event_loop": type(asyncio.get_running_loop()).__module__.partition(".")[0],
        },
    )
    plain = _Server(_config(built.app, settings, settings.port, cap))
    servers = [plain]
    stop = threading.Event()
    loop = asyncio.get_running_loop()

    def shutdown() -> None:
        stop.set()
        for s in servers:
            s.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, shutdown)
    tasks = [asyncio.ensure_future(plain.serve())]
    if settings.tls_port is not None:
        tasks.append(asyncio.ensure_future(_serve_tls(built, settings, servers, stop, cap)))
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        shutdown()
        await asyncio.gather(*tasks, return_exceptions=True)
        for t in done:
            t.result()
    finally:
        stop.set()
        if built.sync is not None:
            built.sync.close()
        _flush_ledger(built)


def _flush_ledger(built: Built, wait_s: float = 5.0) -> None:
    """The bound statuses still riding (ledger/group.py) made durable before the process
    exits; a database that does not answer gets ``wait_s``, then the pods' starts set them.
    A daemon thread of its own, not ``Deadline``'s pool: the interpreter joins a pool's
    threads at exit, so a call stuck on a frozen database would hold the process."""
    flushing = threading.Thread(target=built.service.ledger.flush, name="ledger-flush", daemon=True)
    flushing.start()
    flushing.join(wait_s)
    if flushing.is_alive():
        log.warning("ledger did not answer at shutdown: bound statuses left to the pods' starts")


async def _serve_tls(
    built: Built,
    settings: Settings,
    servers: list[_Server],
    stop: threading.Event,
    cap: ConnectionCap,
) -> None:
    cert, key = settings.tls_cert_file, settings.tls_key_file
    if not cert or not key:
        raise ValueError("tls_port needs tls_cert_file and tls_key_file")
    waited = False
    while not files_present(cert, key):
        if not waited:
            log.warning(
                "TLS certificate not there yet; TLS listener waits for it",
                extra={"cert_file": cert, "tls_port": settings.tls_port},
            )
            waited = True
        if stop.is_set():
            return
        await asyncio.sleep(min(settings.tls_reload_s, 2.0))
    reloader = CertReloader(cert, key)
    reloader.watch(stop, settings.tls_reload_s)
    assert settings.tls_port is not None
    config = _config(built.app, settings, settings.tls_port, cap)
    config.load()
    config.ssl = reloader.context  # uvicorn passes config.ssl to create_server
    server = _Server(config)
    servers.append(server)
    if stop.is_set():
        return
    log.info("TLS listener starting", extra={"tls_port": settings.tls_port})
    await server.serve()
