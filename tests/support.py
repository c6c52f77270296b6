"""Test helpers: realistic Kubernetes objects and a real extender on a loopback socket."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import msgspec

from drivers.agent.loop import build_report
from drivers.gpu.simulated import SimulatedDriver
from extender.core.httpclient import make_client
from extender.scheduling.binder import Binder, InProcessBinder
from extender.settings import Settings
from extender.simulate.server_thread import ServerThread
from extender.wire.clock import ManualClock
from extender.wiring import Built, build

FIXTURES = Path(__file__).parent / "fixtures"
TOKEN = "test-agent-token"


def real_node(
    name: str,
    instance_type: str = "g5.12xlarge",
    capacity_type: str = "spot",
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A full-sized v1.Node (status, images, conditions) as kube-scheduler sends in Nodes mode."""
    node = copy.deepcopy(json.loads((FIXTURES / "node_g5_12xlarge.json").read_text()))
    node["metadata"]["name"] = name
    node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    node["metadata"]["labels"]["node.kubernetes.io/instance-type"] = instance_type
    node["metadata"]["labels"]["karpenter.sh/capacity-type"] = capacity_type
    if taints is not None:
        node["spec"]["taints"] = taints
    return node


def gpu_pod(
    name: str,
    gpus: int = 1,
    memory: str | None = None,
    namespace: str = "ml",
    uid: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    ann = dict(annotations or {})
    if memory is not None:
        ann["headroom.dev/gpu-memory"] = memory
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "labels": {"team": "ml"},
            "annotations": ann,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name + "-job",
                    "uid": "x",
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "main", "image": "pytorch", "resources": resources}]},
    }


@dataclass
class Extender:
    url: str
    built: Built
    clock: ManualClock
    client: httpx.Client
    drivers: dict[str, SimulatedDriver]
    labels: dict[str, dict[str, str]]

    def add_node(
        self,
        name: str,
        spec: str = "4xA10G:24Gi",
        instance_type: str = "g5.12xlarge",
        capacity_type: str = "on-demand",
        seed: int = 1,
    ) -> SimulatedDriver:
        self.drivers[name] = SimulatedDriver(spec, seed=seed, node=name, clock=self.clock)
        self.labels[name] = {
            "node.kubernetes.io/instance-type": instance_type,
            "karpenter.sh/capacity-type": capacity_type,
        }
        self.report(name)
        return self.drivers[name]

    def report(self, name: str) -> httpx.Response:
        driver = self.drivers[name]
        rep = build_report(driver, name, driver.attribute, self.clock, labels=self.labels[name])
        r = self.client.post("/v1/reports", content=msgspec.json.encode(rep))
        r.raise_for_status()
        return r

    def post(self, verb: str, body: Any) -> httpx.Response:
        content = body if isinstance(body, bytes) else msgspec.json.encode(body)
        return self.client.post(
            f"/{verb}", content=content, headers={"Content-Type": "application/json"}
        )

    def schedule_args(self, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
        return {"Pod": pod, "Nodes": None, "NodeNames": nodes}


@contextlib.contextmanager
def running_extender(
    tmp_path: Path, binder: Binder | None = None, **settings: Any
) -> Iterator[Extender]:
    token_file = tmp_path / "agent-token"
    token_file.write_text(TOKEN)
    clock = ManualClock()
    opts: dict[str, Any] = {"db": str(tmp_path / "ledger.db"), "agent_token_file": str(token_file)}
    opts.update(settings)
    built = build(Settings(**opts), clock=clock, binder=binder or InProcessBinder())
    with ServerThread(built.app) as url, make_client(url, TOKEN) as client:
        yield Extender(url, built, clock, client, {}, {})
    built.service.ledger.close()


def known(amount: Decimal | None) -> Decimal:
    """A money amount the test expects to be priced (None would be 'unpriced')."""
    assert amount is not None, "unpriced where a price was expected"
    return amount
