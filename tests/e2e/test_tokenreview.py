"""Agent authentication against the real kube-apiserver: the agent's ServiceAccount gets
a token from the TokenRequest API, audience ``headroom``, bound to a Pod on a Node (as
the kubelet's projected volume does), and the extender checks it with a TokenReview.
It may report for its own node only; other audiences and other ServiceAccounts are
refused; a second report does not cost a second TokenReview; no token is logged."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from drivers.agent.loop import build_report
from drivers.gpu.simulated import SimulatedDriver
from extender.settings import Settings
from extender.simulate.server_thread import ServerThread
from extender.wire.clock import SystemClock
from extender.wiring import Built, build

from .cluster import ControlPlane

pytestmark = pytest.mark.e2e
AGENT_NS = "headroom-system"


def ensure(fn: Callable[..., Any]) -> None:
    try:
        fn()
    except ApiException as e:
        if e.status != 409:
            raise


def token_for(
    core: k8s.CoreV1Api, ns: str, sa: str, audience: str, pod: tuple[str, str] | None
) -> str:
    bound = None
    if pod is not None:
        bound = k8s.V1BoundObjectReference(api_version="v1", kind="Pod", name=pod[0], uid=pod[1])
    req = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(
            audiences=[audience], expiration_seconds=600, bound_object_ref=bound
        )
    )
    status = core.create_namespaced_service_account_token(sa, ns, req).status
    assert status is not None and status.token is not None
    token: str = status.token
    return token


@pytest.fixture
def agent_pods(
    k8s_client: k8s.ApiClient, make_node: Callable[..., str]
) -> Iterator[dict[str, tuple[str, str]]]:
    """Two nodes, an agent pod bound to each (no kubelet: spec.nodeName set directly)."""
    core = k8s.CoreV1Api(k8s_client)
    # below, the client validates each dict body into its model; its stubs accept only the model
    ensure(lambda: core.create_namespace({"metadata": {"name": AGENT_NS}}))  # type: ignore[arg-type]
    for sa in ("default", "headroom-agent", "intruder"):
        ensure(
            lambda sa=sa: core.create_namespaced_service_account(
                AGENT_NS,
                {"metadata": {"name": sa}},  # type: ignore[arg-type]
            )
        )
    suffix = uuid.uuid4().hex[:6]
    pods: dict[str, tuple[str, str]] = {}
    for which in ("a", "b"):
        node = make_node(f"tr-{which}-{suffix}")
        for sa in ("headroom-agent", "intruder"):
            name = f"{sa}-{which}-{suffix}"
            made = core.create_namespaced_pod(
                AGENT_NS,
                {  # type: ignore[arg-type]
                    "metadata": {"name": name},
                    "spec": {
                        "nodeName": node,
                        "serviceAccountName": sa,
                        "automountServiceAccountToken": False,
                        "containers": [{"name": "agent", "image": "headroom"}],
                    },
                },
            )
            assert made.metadata is not None and made.metadata.uid is not None
            pods[f"{sa}-{which}"] = (name, made.metadata.uid)
        pods[f"node-{which}"] = (node, "")
    yield pods
    for key, (name, _) in pods.items():
        if not key.startswith("node-"):
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(name, AGENT_NS, grace_period_seconds=0)


@pytest.fixture
def extender(e2e_cluster: ControlPlane, tmp_path: Path) -> Iterator[tuple[str, Built]]:
    built = build(
        Settings(
            db=str(tmp_path / "l.db"),
            kubeconfig=str(e2e_cluster.kubeconfig),
            agent_token_audience="headroom",
            agent_service_account=f"{AGENT_NS}:headroom-agent",
        )
    )
    with ServerThread(built.app) as url:
        yield url, built
    if built.sync is not None:
        built.sync.close()
    built.service.ledger.close()


def post_report(url: str, node: str, token: str) -> httpx.Response:
    d = SimulatedDriver("1xA10G:24Gi", seed=1, node=node)
    rep = build_report(d, node, d.attribute, SystemClock())
    return httpx.post(
        url + "/v1/reports",
        content=msgspec.json.encode(rep),
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )


def test_agent_token_review_against_the_api_server(
    k8s_client: k8s.ApiClient,
    agent_pods: dict[str, tuple[str, str]],
    extender: tuple[str, Built],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    core = k8s.CoreV1Api(k8s_client)
    url, built = extender
    node_a, node_b = agent_pods["node-a"][0], agent_pods["node-b"][0]
    agent_a = token_for(
        core, AGENT_NS, "headroom-agent", "headroom", agent_pods["headroom-agent-a"]
    )

    r = post_report(url, node_a, agent_a)
    assert r.status_code == 200, r.text
    assert built.service.inventory.received_at(node_a) is not None

    r = post_report(url, node_b, agent_a)  # agent on node a claims node b
    assert r.status_code == 403
    assert f"bound to node {node_a!r}" in r.json()["detail"]
    assert built.service.inventory.received_at(node_b) is None

    wrong_audience = token_for(
        core, AGENT_NS, "headroom-agent", "kubernetes", agent_pods["headroom-agent-a"]
    )
    r = post_report(url, node_a, wrong_audience)
    assert r.status_code == 401 and "audience" in r.json()["detail"]

    intruder = token_for(core, AGENT_NS, "intruder", "headroom", agent_pods["intruder-a"])
    r = post_report(url, node_a, intruder)
    assert r.status_code == 403 and "is not the headroom agent" in r.json()["detail"]

    unbound = token_for(core, AGENT_NS, "headroom-agent", "headroom", None)
    r = post_report(url, node_a, unbound)
    assert r.status_code == 403 and "not bound to a pod" in r.json()["detail"]

    assert post_report(url, node_a, "garbage.not.a.jwt").status_code == 401

    agent_b = token_for(
        core, AGENT_NS, "headroom-agent", "headroom", agent_pods["headroom-agent-b"]
    )
    assert post_report(url, node_b, agent_b).status_code == 200

    tokens = [agent_a, agent_b, wrong_audience, intruder, unbound]
    logged = "\n".join(str(vars(rec)) for rec in caplog.records)
    for t in tokens:
        assert t not in logged


def test_successful_reviews_are_cached(
    k8s_client: k8s.ApiClient,
    agent_pods: dict[str, tuple[str, str]],
    extender: tuple[str, Built],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    core = k8s.CoreV1Api(k8s_client)
    url, _ = extender
    calls: list[int] = []
    original = k8s.AuthenticationV1Api.create_token_review

    def counted(self: Any, *a: Any, **kw: Any) -> Any:
        calls.append(1)
        return original(self, *a, **kw)

    monkeypatch.setattr(k8s.AuthenticationV1Api, "create_token_review", counted)
    token = token_for(core, AGENT_NS, "headroom-agent", "headroom", agent_pods["headroom-agent-a"])
    for _ in range(5):
        assert post_report(url, agent_pods["node-a"][0], token).status_code == 200
    assert len(calls) == 1
