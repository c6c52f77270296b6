"""Who may write, and who may read: shared token, TokenReview'd agent tokens bound to a
node, the audit token; every refusal answered with the reason and no secret in any
reply or log. (The TokenReview against a real kube-apiserver is tests/e2e/
test_tokenreview.py; here the API server's answer is a stub so each branch is forced.)"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import msgspec
import pytest

from drivers.agent.loop import build_report
from drivers.gpu.simulated import SimulatedDriver
from extender.http.app import create_app
from extender.http.auth import Authenticator, TokenFile
from extender.http.tokenreview import NODE_NAME_EXTRA, TokenReviewer
from extender.scheduling.binder import InProcessBinder
from extender.settings import Settings
from extender.simulate.server_thread import ServerThread
from extender.wire.clock import ManualClock
from extender.wiring import build

SHARED = "shared-secret-token-123"
AUDIT = "audit-secret-token-456"
AGENT_SA = "system:serviceaccount:headroom-system:headroom-agent"
LABELS = {
    "node.kubernetes.io/instance-type": "g5.12xlarge",
    "karpenter.sh/capacity-type": "on-demand",
}


def user(name: str = AGENT_SA, node: str | None = "node-a") -> Any:
    return SimpleNamespace(username=name, extra={NODE_NAME_EXTRA: [node]} if node else {})


class FakeApiServer:
    """Answers TokenReviews from a table token -> status (or raises)."""

    def __init__(self) -> None:
        self.table: dict[str, Any] = {}
        self.calls = 0

    def review(self, token: str, audience: str) -> Any:
        self.calls += 1
        answer = self.table.get(token)
        if isinstance(answer, Exception):
            raise answer
        if answer is None:
            return SimpleNamespace(
                status=SimpleNamespace(authenticated=False, user=None, audiences=None)
            )
        return SimpleNamespace(status=answer)


def ok(u: Any, audiences: list[str] | None = None) -> Any:
    return SimpleNamespace(authenticated=True, user=u, audiences=audiences or ["headroom"])


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@contextlib.contextmanager
def served(
    tmp_path: Path, api: FakeApiServer, now: Clock | None = None, **settings: Any
) -> Iterator[tuple[httpx.Client, TokenReviewer]]:
    (tmp_path / "shared").write_text(SHARED + "\n")
    (tmp_path / "audit").write_text(AUDIT)
    built = build(
        Settings(db=str(tmp_path / "l.db"), **settings),
        clock=ManualClock(),
        binder=InProcessBinder(),
    )
    reviewer = TokenReviewer(
        api.review,
        "headroom",
        "headroom-system:headroom-agent",
        ttl_s=60,
        max_entries=2,
        now=now or Clock(),
    )
    app = create_app(
        built.service,
        auth=Authenticator(TokenFile(str(tmp_path / "shared")), reviewer),
        audit_token=TokenFile(str(tmp_path / "audit")),
        max_nodes=settings.get("max_nodes_per_request", 50_000),
    )
    with ServerThread(app) as url, httpx.Client(base_url=url) as c:
        yield c, reviewer
    built.service.ledger.close()


def report(node: str) -> bytes:
    d = SimulatedDriver("2xA10G:24Gi", seed=1, node=node)
    return msgspec.json.encode(build_report(d, node, d.attribute, ManualClock(), labels=LABELS))


def post_report(c: httpx.Client, node: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return c.post("/v1/reports", content=report(node), headers=headers)


@pytest.fixture
def api() -> FakeApiServer:
    return FakeApiServer()


def test_reports_need_a_credential(tmp_path: Path, api: FakeApiServer) -> None:
    with served(tmp_path, api) as (c, _):
        assert post_report(c, "node-a", None).status_code == 401
        r = post_report(c, "node-a", "not-a-token")
        assert r.status_code == 401 and "not accepted" in r.json()["detail"]
        assert post_report(c, "node-a", SHARED).status_code == 200  # the shared token
        r = c.post("/v1/reports", content=report("node-a"), headers={"Authorization": SHARED})
        assert r.status_code == 401  # not a Bearer header


def test_agent_token_reports_only_for_its_own_node(tmp_path: Path, api: FakeApiServer) -> None:
    api.table["agent-a"] = ok(user(node="node-a"))
    with served(tmp_path, api) as (c, _):
        assert post_report(c, "node-a", "agent-a").status_code == 200
        r = post_report(c, "node-b", "agent-a")
        assert r.status_code == 403
        assert "bound to node 'node-a'" in r.json()["detail"]
        assert "'node-b'" in r.json()["detail"]
        # a refused report changes nothing: node-b stays unknown
        f = c.post(
            "/filter",
            json={
                "Pod": {
                    "metadata": {"name": "p", "uid": "u"},
                    "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                },
                "NodeNames": ["node-b"],
            },
        ).json()
        assert "no report" in f["FailedAndUnresolvableNodes"]["node-b"]


@pytest.mark.parametrize(
    ("status", "code", "why"),
    [
        (ok(user(name="system:serviceaccount:default:intruder")), 403, "is not the headroom agent"),
        (ok(user(node=None)), 403, "not bound to a pod on a node"),
        (ok(user(), audiences=["kubernetes"]), 401, "not for audience"),
        (SimpleNamespace(authenticated=False, user=None, audiences=None), 401, "not accepted"),
    ],
)
def test_agent_token_refusals(
    tmp_path: Path, api: FakeApiServer, status: Any, code: int, why: str
) -> None:
    api.table["tok"] = status
    with served(tmp_path, api) as (c, _):
        r = post_report(c, "node-a", "tok")
        assert r.status_code == code and why in r.json()["detail"]


def test_api_server_down_is_503_not_401(tmp_path: Path, api: FakeApiServer) -> None:
    api.table["tok"] = ConnectionError("apiserver unreachable tok")
    with served(tmp_path, api) as (c, _):
        r = post_report(c, "node-a", "tok")
        assert r.status_code == 503 and "TokenReview failed" in r.json()["detail"]
        assert "tok" not in r.json()["detail"].replace("TokenReview", "")


def test_reviews_are_cached_for_the_ttl_and_bounded(tmp_path: Path, api: FakeApiServer) -> None:
    now = Clock()
    for n in ("a", "b", "c"):
        api.table[f"agent-{n}"] = ok(user(node=f"node-{n}"))
    with served(tmp_path, api, now) as (c, reviewer):
        for _ in range(5):
            assert post_report(c, "node-a", "agent-a").status_code == 200
        assert api.calls == 1
        now.t = 61  # past the TTL: asked again
        assert post_report(c, "node-a", "agent-a").status_code == 200
        assert api.calls == 2
        assert post_report(c, "node-b", "agent-b").status_code == 200
        assert post_report(c, "node-c", "agent-c").status_code == 200  # evicts agent-a
        assert api.calls == 4
        assert post_report(c, "node-a", "agent-a").status_code == 200
        assert api.calls == 5
        assert reviewer.reviews == api.calls


def test_failed_reviews_are_not_cached(tmp_path: Path, api: FakeApiServer) -> None:
    with served(tmp_path, api) as (c, _):
        assert post_report(c, "node-a", "late").status_code == 401
        api.table["late"] = ok(user())  # the pod's token became valid
        assert post_report(c, "node-a", "late").status_code == 200


def test_agents_cannot_release_pods(tmp_path: Path, api: FakeApiServer) -> None:
    api.table["agent-a"] = ok(user())
    with served(tmp_path, api) as (c, _):
        assert c.post("/v1/pods/u1/release").status_code == 401
        r = c.post("/v1/pods/u1/release", headers={"Authorization": "Bearer agent-a"})
        assert r.status_code == 403 and "shared token" in r.json()["detail"]
        r = c.post("/v1/pods/u1/release", headers={"Authorization": f"Bearer {SHARED}"})
        assert r.status_code == 200


def test_audit_api_token(tmp_path: Path, api: FakeApiServer) -> None:
    with served(tmp_path, api) as (c, _):
        assert c.get("/v1/allocations").status_code == 401
        assert (
            c.get("/v1/allocations", headers={"Authorization": f"Bearer {SHARED}"}).status_code
            == 401
        )
        assert (
            c.get("/v1/allocations", headers={"Authorization": f"Bearer {AUDIT}"}).status_code
            == 200
        )
        assert c.get("/healthz").status_code == 200  # probes stay open


def test_audit_api_is_open_by_default(tmp_path: Path) -> None:
    built = build(Settings(db=str(tmp_path / "l.db")), clock=ManualClock())
    with ServerThread(built.app) as url:
        assert httpx.get(url + "/v1/allocations").status_code == 200
    built.service.ledger.close()


def test_no_secret_in_replies_or_logs(
    tmp_path: Path, api: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    api.table["agent-secret-a"] = ok(user())
    api.table["intruder-secret"] = ok(user(name="system:serviceaccount:x:y"))
    bodies = []
    with served(tmp_path, api) as (c, _):
        for token, node in [
            ("agent-secret-a", "node-b"),
            ("intruder-secret", "node-a"),
            ("wrong-secret", "node-a"),
            (SHARED + "x", "node-a"),
        ]:
            bodies.append(post_report(c, node, token).text)
        bodies.append(c.get("/v1/allocations", headers={"Authorization": "Bearer " + SHARED}).text)
    secrets = ["agent-secret-a", "intruder-secret", "wrong-secret", SHARED, AUDIT]
    text = "\n".join(bodies) + "\n".join(str(vars(r)) for r in caplog.records)
    assert "refused" in text  # the refusals were logged ...
    for s in secrets:
        assert s not in text  # ... without the token


def test_node_count_and_name_bounds(tmp_path: Path, api: FakeApiServer) -> None:
    pod = {"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": []}}
    with served(tmp_path, api, max_nodes_per_request=10) as (c, _):
        for verb in ("filter", "prioritize"):
            r = c.post(f"/{verb}", json={"Pod": pod, "NodeNames": [f"n{i}" for i in range(11)]})
            assert r.status_code == 413 and "more than the limit of 10" in r.json()["Error"]
            r = c.post(f"/{verb}", json={"Pod": pod, "NodeNames": ["x" * 254]})
            assert r.status_code == 400 and "length <= 253" in r.json()["Error"]
            assert "NodeNames[0]" in r.json()["Error"]
            r = c.post(f"/{verb}", json={"Pod": pod, "NodeNames": ["n1", ""]})
            assert r.status_code == 400 and "NodeNames[1]" in r.json()["Error"]
        r = c.post(
            "/preempt",
            json={"Pod": pod, "NodeNameToMetaVictims": {f"n{i}": {"Pods": []} for i in range(11)}},
        )
        assert r.status_code == 413
        r = c.post(
            "/bind", json={"PodName": "p" * 300, "PodNamespace": "ns", "PodUID": "u", "Node": "n"}
        )
        assert r.status_code == 400 and "at most 253" in r.json()["Error"]
        assert c.post("/filter", json={"Pod": pod, "NodeNames": ["n1"]}).status_code == 200
