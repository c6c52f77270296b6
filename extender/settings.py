"""The one settings object: environment (HEADROOM_*) first, CLI flags on top."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HEADROOM_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8888, ge=0, le=65535)
    db: str = "headroom.db"  # SQLite path or postgresql:// DSN
    # every wait on the ledger database (connect, statement, lock, SQLite busy) and the
    # wait of a pod's second bind for its first: both below kube-scheduler's 5 s extender
    # httpTimeout, so a bind answers an Error before the scheduler gives up on it
    ledger_timeout: float = Field(3.0, gt=0, le=60)
    # a bind's bound status waits at most this long for another write's transaction to
    # ride in before the ledger's flusher commits it alone (extender/ledger/group.py)
    ledger_ride_s: float = Field(0.05, ge=0, le=60)
    bind_wait: float = Field(4.0, gt=0, le=60)
    policy: str = "headroom"
    # filter passes only fitting nodes within epsilon of the best blended score, so the
    # scheduler's integer rounding and random tie-breaks cannot undo the order
    narrowing: bool = True
    narrow_epsilon: float = Field(0.02, ge=0, le=1)
    # with narrowing, the filter passes only the best node for a pod that states no
    # preference of its own (soft affinity, ScheduleAnyway spreading): kube-scheduler then
    # binds it without a prioritize call or its own scores (docs/scheduling.md, "Deciding")
    decide: bool = True
    cost_weight: float = Field(1.0, ge=0)
    policy_weight: float = Field(1.0, gt=0)
    stale_after: float = Field(30.0, gt=0, description="seconds before a report is stale")
    # on nodes labelled headroom.dev/device-plugin=true, a bound grant holds the node's
    # next GPU pod back until the plugin acknowledges it, at most this long; then it is
    # an `unacknowledged` discrepancy and the node is free (docs/device-plugin.md)
    ack_timeout: float = Field(60.0, gt=0, le=3600)
    # after each agent report and bind, the plans of the shapes filtered in the last
    # refresh_window seconds (at most refresh_shapes) are brought up to date, so the next
    # pod's filter does not do it (extender/scheduling/hotshapes.py); 0 turns it off
    refresh_shapes: int = Field(2, ge=0)
    refresh_window: float = Field(10.0, ge=0)
    # a pending GPU pod the pod watch sees gets its plan made before kube-scheduler's
    # filter asks for it, for at most plan_ahead shapes waiting at once
    # (extender/scheduling/announced.py); 0 turns it off
    plan_ahead: int = Field(4, ge=0)
    # a new pod shape's pass placing it on 2,048 nodes or more is shared with a helper on a
    # second CPU (extender/scoring/helper.h); never started with one CPU or a CPU limit
    # under 2, and false turns it off anywhere
    scoring_helper: bool = True
    margin_mib: int = Field(512, ge=0, description="safety margin kept free on each GPU")
    idle_mib: int = Field(1024, ge=0, description="used memory below which a GPU counts idle")
    price_file: str | None = None
    spot_discount: float = Field(0.6, ge=0, lt=1)
    kubeconfig: str | None = None
    in_cluster: bool = False
    webhook_mode: Literal["deny", "warn"] = "deny"
    webhook_exempt_namespaces: str = "kube-system"  # comma-separated
    max_body_bytes: int = Field(64 * 1024 * 1024, gt=0)
    # kube-scheduler sends at most the cluster's node count; 50,000 is its scale limit
    max_nodes_per_request: int = Field(50_000, gt=0)
    log_level: str = "info"

    # --- who may write (reports, release) and read (audit) ---------------------------
    agent_token_file: str | None = None  # shared bearer token (a mounted Secret)
    allow_unauthenticated_reports: bool = False
    # TokenReview of the agents' projected ServiceAccount tokens (needs a cluster)
    agent_token_audience: str | None = None
    agent_service_account: str = "headroom-system:headroom-agent"  # namespace:name
    token_review_ttl_s: float = Field(60.0, ge=0)
    token_review_cache_size: int = Field(20_000, gt=0)
    audit_token_file: str | None = None  # bearer token for the read-only /v1 audit API

    # --- TLS listener: the same API and the admission webhook, cert reloaded on change --
    tls_port: int | None = Field(None, ge=0, le=65535)
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_reload_s: float = Field(10.0, gt=0, description="how often cert files are checked")

    # --- the HTTP edge (docs/reliability.md, "Edge limits") ----------------------------
    # max_body_bytes above bounds filter/prioritize: Nodes mode carries a v1.NodeList,
    # tens of MB at 5,000 nodes. A binding is ~100 bytes; a preemption with full victim
    # Pods (not nodeCacheCapable) a few MB per 100 candidate nodes.
    max_bind_body_bytes: int = Field(64 * 1024, gt=0)
    max_preempt_body_bytes: int = Field(32 * 1024 * 1024, gt=0)
    # memory for request bodies over 64 KiB being read at once (each held twice while
    # read), all routes and listeners: two full-size filter bodies; a request beyond it
    # is answered 503 before it is read
    body_budget_bytes: int = Field(256 * 1024 * 1024, gt=0)
    idle_timeout_s: float = Field(5.0, gt=0)  # a connection with no request in flight
    header_timeout_s: float = Field(10.0, gt=0)  # first byte of a request to its headers
    body_timeout_s: float = Field(30.0, gt=0)  # headers to the end of the body
    max_connections: int = Field(0, ge=0)  # 0: the open-file limit - 384, at most 4096
    # who may call filter/prioritize/bind/preempt without the shared bearer token: only
    # loopback peers (kube-scheduler in the same pod), or anyone (a remote kube-scheduler)
    scheduler_verbs: Literal["loopback", "any"] = "loopback"
