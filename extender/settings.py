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
    policy: str = "fgd"
    cost_weight: float = Field(1.0, ge=0)
    policy_weight: float = Field(1.0, gt=0)
    stale_after: float = Field(30.0, gt=0, description="seconds before a report is stale")
    margin_mib: int = Field(512, ge=0, description="safety margin kept free on each GPU")
    idle_mib: int = Field(1024, ge=0, description="used memory below which a GPU counts idle")
    price_file: str | None = None
    spot_discount: float = Field(0.6, ge=0, lt=1)
    agent_token_file: str | None = None
    allow_unauthenticated_reports: bool = False
    kubeconfig: str | None = None
    in_cluster: bool = False
    webhook_mode: Literal["deny", "warn"] = "deny"
    webhook_exempt_namespaces: str = "kube-system"  # comma-separated
    max_body_bytes: int = Field(64 * 1024 * 1024, gt=0)
    log_level: str = "info"
