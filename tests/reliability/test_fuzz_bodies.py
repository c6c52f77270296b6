"""Hostile bodies for the scheduler verbs, agent reports and the webhook: random JSON,
deep nesting, huge numbers, unicode, invalid UTF-8, and well-shaped bodies with wild
values. Never a 5xx, and a refused (4xx) request changes no state."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.wiring import Built

from .fuzzutil import AUTH, NODES, fuzz_extender, state

VERBS = [
    "/filter",
    "/prioritize",
    "/bind",
    "/preempt",
    "/v1/reports",
    "/admit/pods",
    "/v1/pods/uid-seed/release",
]
FUZZ = settings(
    max_examples=250,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

big_ints = st.one_of(st.integers(), st.sampled_from([2**63, -(2**63) - 1, 10**400, -1, 0]))
text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            "\x00",
            "\ud7ff\ue000",
            "🙂" * 50,
            "a" * 300,
            "1e400",
            "NaN",
            "-1",
            "Infinity",
            "1Ei",
            "0.5",
            "99999999999999999999Gi",
            "../../etc",
            "n1",
            "uid-seed",
        ]
    ),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), big_ints, st.floats(allow_nan=False), text),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(text, inner, max_size=5)),
    max_leaves=30,
)
quantity = st.one_of(text, big_ints)
pod = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "name": text,
                "namespace": text,
                "uid": text,
                "annotations": st.dictionaries(
                    st.sampled_from(
                        [
                            "headroom.dev/gpu-memory",
                            "headroom.dev/capacity-type",
                            "karpenter.sh/do-not-disrupt",
                        ]
                    ),
                    text,
                ),
                "ownerReferences": st.lists(
                    st.dictionaries(text, json_values, max_size=3), max_size=2
                ),
            },
        ),
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "containers": st.lists(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "resources": st.fixed_dictionaries(
                                {},
                                optional={
                                    "limits": st.dictionaries(
                                        st.sampled_from(
                                            ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "cpu"]
                                        ),
                                        quantity,
                                    ),
                                },
                            ),
                            "env": st.lists(
                                st.fixed_dictionaries({"name": text, "value": text}), max_size=2
                            ),
                        },
                    ),
                    max_size=3,
                ),
                "resourceClaims": st.lists(st.dictionaries(text, text, max_size=3), max_size=2),
            },
        ),
    },
)
names = st.lists(st.one_of(st.sampled_from(NODES), text), max_size=6)
extender_args = st.fixed_dictionaries(
    {},
    optional={
        "Pod": st.one_of(st.none(), pod),
        "NodeNames": st.one_of(st.none(), names),
        "Nodes": st.one_of(
            st.none(), st.fixed_dictionaries({"items": st.lists(json_values, max_size=3)})
        ),
    },
)
binding = st.fixed_dictionaries(
    {},
    optional={
        k: st.one_of(text, json_values) for k in ("PodName", "PodNamespace", "PodUID", "Node")
    },
)
preemption = st.fixed_dictionaries(
    {},
    optional={
        "Pod": pod,
        "NodeNameToMetaVictims": st.dictionaries(
            text,
            st.fixed_dictionaries(
                {},
                optional={
                    "Pods": st.lists(st.fixed_dictionaries({"UID": text}), max_size=3),
                    "NumPDBViolations": big_ints,
                },
            ),
            max_size=3,
        ),
    },
)
gpu = st.fixed_dictionaries(
    {
        "uuid": text,
        "index": big_ints,
        "model": text,
        "memory_total_mib": big_ints,
        "memory_used_mib": big_ints,
    },
    optional={
        "processes": st.lists(
            st.fixed_dictionaries(
                {"pid": big_ints}, optional={"used_mib": big_ints, "pod_uid": text}
            ),
            max_size=3,
        ),
        "mig_enabled": st.booleans(),
        "healthy": st.booleans(),
    },
)
report = st.fixed_dictionaries(
    {
        "node": st.one_of(st.just("n-fuzz"), text),
        "sampled_at": st.one_of(st.floats(allow_nan=False), big_ints),
        "gpus": st.lists(gpu, max_size=3),
    },
    optional={"schema": text, "labels": st.dictionaries(text, text)},
)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Built, TestClient]]:
    built, client = fuzz_extender(tmp_path_factory.mktemp("fuzz"))
    yield built, client
    built.service.ledger.close()


def post(app: tuple[Built, TestClient], path: str, body: bytes) -> None:
    built, client = app
    before = state(built)
    r = client.post(path, content=body, headers={"Content-Type": "application/json", **AUTH})
    assert r.status_code < 500, (path, body[:300], r.status_code, r.text[:300])
    if 400 <= r.status_code < 500:
        assert state(built) == before, (path, body[:300], r.status_code, r.text[:300])
        if path.startswith(("/filter", "/prioritize", "/bind", "/preempt")):
            assert r.json()["Error"]  # refusals name what was wrong


def dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@FUZZ
@given(path=st.sampled_from(VERBS), value=json_values)
def test_random_json(app: tuple[Built, TestClient], path: str, value: Any) -> None:
    post(app, path, dump(value))


@FUZZ
@given(path=st.sampled_from(VERBS), raw=st.binary(max_size=200))
def test_random_bytes(app: tuple[Built, TestClient], path: str, raw: bytes) -> None:
    post(app, path, raw)


@FUZZ
@given(path=st.sampled_from(["/filter", "/prioritize"]), body=extender_args)
def test_extender_args(app: tuple[Built, TestClient], path: str, body: Any) -> None:
    post(app, path, dump(body))


@FUZZ
@given(body=binding)
def test_binding_args(app: tuple[Built, TestClient], body: Any) -> None:
    post(app, "/bind", dump(body))


@FUZZ
@given(body=preemption)
def test_preemption_args(app: tuple[Built, TestClient], body: Any) -> None:
    post(app, "/preempt", dump(body))


@FUZZ
@given(body=report)
def test_reports(app: tuple[Built, TestClient], body: Any) -> None:
    post(app, "/v1/reports", dump(body))


@pytest.mark.parametrize("depth", [64, 1000, 100_000])
@pytest.mark.parametrize("path", VERBS)
def test_deep_nesting(app: tuple[Built, TestClient], path: str, depth: int) -> None:
    post(app, path, b"[" * depth + b"]" * depth)
    post(app, path, b'{"Pod":' * depth + b"1" + b"}" * depth)


@pytest.mark.parametrize("path", VERBS)
def test_oversized_bodies_are_413(app: tuple[Built, TestClient], path: str) -> None:
    built, client = app
    before = state(built)
    huge = b"[" + b"0," * (40 * 1024 * 1024) + b"0]"  # 80 MiB > 64 MiB, declared
    r = client.post(path, content=huge, headers={"Content-Type": "application/json", **AUTH})
    assert r.status_code == 413
    if "release" not in path:  # release reads no body, so a streamed one never matters
        chunks = (b"[" + b"0," * (1024 * 1024) for _ in range(40))  # streamed, no length
        r = client.post(path, content=chunks, headers={"Content-Type": "application/json", **AUTH})
        assert r.status_code == 413
    assert state(built) == before
