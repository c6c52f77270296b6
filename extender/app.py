"""Wiring: Settings -> ledger, prices, inventory, binder, policy -> service -> ASGI app."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import FastAPI

from extender.auth import TokenFile
from extender.binder import Binder, InProcessBinder
from extender.clock import Clock, SystemClock
from extender.inventory import Inventory
from extender.kube.binder import KubeBinder
from extender.kube.client import api_client
from extender.kube.events import EventRecorder
from extender.kube.sync import ClusterSync
from extender.ledger import open_ledger
from extender.metrics import attach_ledger
from extender.pricing import load_pricebook
from extender.scoring import Limits, Weights, policy_by_name
from extender.server import create_app
from extender.service import SchedulingService, ServiceConfig
from extender.settings import Settings
from extender.webhook import WebhookPolicy


@dataclass
class Built:
    service: SchedulingService
    app: FastAPI
    sync: ClusterSync | None = None


def build(settings: Settings, clock: Clock | None = None, binder: Binder | None = None) -> Built:
    """Standalone (in-process binder) unless a kubeconfig or in-cluster config is set."""
    clock = clock or SystemClock()
    api = None
    if settings.kubeconfig or settings.in_cluster:
        api = api_client(settings.kubeconfig)
        binder = binder or KubeBinder(api)
    ledger = open_ledger(settings.db, clock)
    inventory = Inventory(load_pricebook(settings.price_file, settings.spot_discount))
    config = ServiceConfig(
        stale_after=settings.stale_after,
        limits=Limits(margin_mib=settings.margin_mib, idle_mib=settings.idle_mib),
        weights=Weights(policy=settings.policy_weight, cost=settings.cost_weight),
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
    sync = None
    if api is not None:
        sync = ClusterSync(api, service)
        service.unplaceable_hooks.append(EventRecorder(api, clock).unplaceable)
        sync.start()
    token = TokenFile(settings.agent_token_file) if settings.agent_token_file else None
    app = create_app(
        service,
        max_body_bytes=settings.max_body_bytes,
        agent_token=token,
        allow_unauthenticated_reports=settings.allow_unauthenticated_reports,
        ready=(lambda: sync.wait_synced(0)) if sync else (lambda: True),
        webhook=WebhookPolicy(
            mode=settings.webhook_mode,
            exempt_namespaces=frozenset(
                ns.strip() for ns in settings.webhook_exempt_namespaces.split(",") if ns.strip()
            ),
        ),
    )
    return Built(service, app, sync)
