"""A shared in-process extender for the fuzz tests, and what "state" means for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from extender.scheduling.binder import InProcessBinder
from extender.settings import Settings
from extender.wire.clock import ManualClock
from extender.wiring import Built, build

TOKEN = "fuzz-agent-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NODES = ["n1", "n2"]


def fuzz_extender(folder: Path) -> tuple[Built, TestClient]:
    (folder / "token").write_text(TOKEN)
    built = build(
        Settings(
            db=str(folder / "ledger.db"),
            agent_token_file=str(folder / "token"),
            stale_after=1e9,
            max_nodes_per_request=5000,
        ),
        clock=ManualClock(),
        binder=InProcessBinder(),
    )
    client = TestClient(built.app, raise_server_exceptions=False)
    for name in NODES:  # two reporting nodes and one bound pod, so there is state to keep
        client.post(
            "/v1/reports",
            headers=AUTH,
            json={
                "node": name,
                "sampled_at": 1.0,
                "driver": "simulated",
                "gpus": [
                    {
                        "uuid": f"GPU-{name}",
                        "index": 0,
                        "model": "A10G",
                        "memory_total_mib": 24576,
                        "memory_used_mib": 100,
                    }
                ],
            },
        ).raise_for_status()
    pod = {
        "metadata": {"name": "seed", "namespace": "ml", "uid": "uid-seed"},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    client.post("/filter", json={"Pod": pod, "NodeNames": NODES}).raise_for_status()
    r = client.post(
        "/bind", json={"PodName": "seed", "PodNamespace": "ml", "PodUID": "uid-seed", "Node": "n1"}
    )
    assert r.json()["Error"] == ""
    return built, client


def state(built: Built) -> tuple[Any, ...]:
    """Everything a refused request must leave alone: which nodes have reports (and
    when), every reservation, every active ledger row. (Node *facts* from a Nodes-mode
    body are not in it: the service applies each node's labels as it decodes it, so a
    body refused for a later bad item has already applied the earlier ones.)"""
    inv = built.service.inventory
    nodes = tuple(
        sorted((n, inv.received_at(n)) for n in inv.node_names() if inv.received_at(n) is not None)
    )
    grants = tuple(
        sorted(
            (g.pod_uid, g.gpu_uuid, g.memory_mib)
            for n in inv.node_names()
            for g in inv.grants_on_node(n)
        )
    )
    built.service.ledger.flush()  # a bound status from an earlier bind may still ride
    rows = tuple(sorted((a.id, a.status, a.ended_at) for a in built.service.ledger.active()))
    return nodes, grants, rows
