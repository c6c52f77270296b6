"""10,000 seeded hostile requests over every route (issue 23): valid bodies mutated
field by field (wrong types, huge and hostile quantities, unicode, deletions, junk
bytes) and audit queries with wild parameters. Never a 5xx, and a refused (4xx)
request changes no state. The slowest request is printed, not asserted (speed lives
in docs; tests assert behaviour)."""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from extender.wiring import Built

from .fuzzutil import AUTH, NODES, fuzz_extender, state

REQUESTS = 10_000
SEED = 23

POD = {
    "metadata": {
        "name": "f",
        "namespace": "ml",
        "uid": "uid-f",
        "annotations": {"headroom.dev/gpu-memory": "4Gi"},
    },
    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}
GPU = {"uuid": "GPU-x", "index": 0, "model": "A10G", "memory_total_mib": 24576,
       "memory_used_mib": 10}  # fmt: skip
TEMPLATES: dict[str, Any] = {
    "/filter": {"Pod": POD, "NodeNames": NODES},
    "/prioritize": {"Pod": POD, "NodeNames": NODES},
    "/bind": {"PodName": "f", "PodNamespace": "ml", "PodUID": "uid-f", "Node": "n1"},
    "/preempt": {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-seed"}]}}},
    "/v1/reports": {"node": "n-fuzz", "sampled_at": 1.0, "gpus": [GPU]},
    "/admit/pods": {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "r1", "object": POD, "namespace": "ml"},
    },
    "/v1/pods/uid-seed/release": {},
}
AUDIT = ["/v1/allocations", "/v1/chargeback", "/v1/discrepancies", "/v1/events",
         "/v1/allocations/1", "/metrics", "/readyz", "/healthz"]  # fmt: skip
PARAMS = ["namespace", "node", "pod", "active", "from", "to", "limit", "cursor", "group_by",
          "format"]  # fmt: skip
WILD: list[Any] = [
    None, True, -1, 0, 2**63, -(2**63) - 1, 10**400, 1e308, "", "\x00", "🙂" * 40, "a" * 300,
    "1e999999", "1e999999Gi", "9" * 5000, "\u0663Gi", "1_000Gi", "NaN", "-1Gi", "../..",
    [], {}, [1, 2], {"a": {"b": []}}, "n1", "uid-seed",
]  # fmt: skip


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*at, i))


def _mutate(rng: random.Random, template: Any) -> bytes:
    body = copy.deepcopy(template)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(body) if p]
        if not paths:
            body = copy.deepcopy(rng.choice(WILD))
            break
        path = rng.choice(paths)
        parent = body
        for key in path[:-1]:
            parent = parent[key]
        if rng.random() < 0.2:
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(WILD))
    raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if rng.random() < 0.05:  # truncated or junk-suffixed bytes
        raw = raw[: rng.randrange(len(raw) + 1)] + bytes(rng.randrange(256) for _ in range(3))
    return raw


def _query(rng: random.Random) -> dict[str, str]:
    return {rng.choice(PARAMS): str(rng.choice(WILD))[:200] for _ in range(rng.randint(0, 3))}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Built, TestClient]]:
    built, client = fuzz_extender(tmp_path_factory.mktemp("fuzz-seeded"))
    yield built, client
    built.service.ledger.close()


def test_ten_thousand_hostile_requests_over_every_route(app: tuple[Built, TestClient]) -> None:
    built, client = app
    rng = random.Random(SEED)
    routes = list(TEMPLATES) + AUDIT
    slowest, by_status = (0.0, ""), {}  # type: ignore[var-annotated]
    for _ in range(REQUESTS):
        route = rng.choice(routes)
        before = state(built)
        t = time.perf_counter()
        if route in TEMPLATES:
            r = client.post(route, content=_mutate(rng, TEMPLATES[route]), headers=AUTH)
        else:
            r = client.get(route, params=_query(rng), headers=AUTH)
        took = time.perf_counter() - t
        slowest = max(slowest, (took, route))
        by_status[r.status_code] = by_status.get(r.status_code, 0) + 1
        assert r.status_code < 500 or (route == "/readyz" and r.status_code == 503), (
            route,
            r.status_code,
            r.text[:300],
        )
        if 400 <= r.status_code < 500 and route in TEMPLATES:
            assert state(built) == before, (route, r.status_code, r.text[:300])
    print(f"\n{REQUESTS} requests, statuses {dict(sorted(by_status.items()))}, "
          f"slowest {slowest[0] * 1e3:.1f} ms ({slowest[1]})")  # fmt: skip
    assert len(by_status) > 3  # the mutations reached refusals and answers alike
