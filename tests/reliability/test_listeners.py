"""Issue 23 F5, listeners by audience: the TLS listener (open to every pod, because the
API server must reach the webhook) serves the webhook and the probes to anyone, the
audit API only with its token, the scheduler verbs only with the shared token, nothing
else; on the plain listener the scheduler verbs answer loopback peers or the token.
A real ``headroom serve`` over TLS, and the app in process for a non-loopback peer
(every test socket is on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path
from typing import Literal

import httpx
import pytest

from extender.scheduling.binder import InProcessBinder
from extender.settings import Settings
from extender.simulate.server_thread import free_port
from extender.wire.clock import ManualClock
from extender.wiring import build
from tests.reliability.test_tls import make_cert
from tests.serveproc import TOKEN, ServeProc

AUDIT = "audit-reader-token"
POD = {
    "metadata": {"name": "p", "namespace": "ml", "uid": "u-p"},
    "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}
FILTER = {"Pod": POD, "NodeNames": ["n1"]}
BIND = {"PodName": "p", "PodNamespace": "ml", "PodUID": "u-p", "Node": "n1"}
REVIEW = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "r1",
        "kind": {"kind": "Pod"},
        "operation": "CREATE",
        "namespace": "ml",
        "object": {"metadata": {"name": "p"}, "spec": {"containers": []}},
    },
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tls_serve(tmp_path: Path, audit: bool) -> tuple[ServeProc, int, Path]:
    cert, key = make_cert(tmp_path / "cert", "headroom")
    port = free_port()
    extra = ["--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key)]
    if audit:
        (tmp_path / "audit").write_text(AUDIT)
        extra += ["--audit-token-file", str(tmp_path / "audit")]
    serve = ServeProc(tmp_path, str(tmp_path / "l.db"), extra)
    serve.start()
    return serve, port, cert


def tls_client(port: int, cert: Path) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:  # the TLS listener starts a moment after the plain one
        try:
            httpx.get(url + "/healthz", verify=ctx, timeout=30)
            return httpx.Client(base_url=url, verify=ctx, timeout=30)
        except httpx.ConnectError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_tls_listener_serves_each_audience_its_routes(tmp_path: Path) -> None:
    serve, port, cert = tls_serve(tmp_path, audit=True)
    try:
        serve.report("n1")
        with tls_client(port, cert) as c:
            for verb, body in (("/filter", FILTER), ("/bind", BIND), ("/preempt", {})):
                r = c.post(verb, json=body)  # from loopback, but on TLS: no token, no verb
                assert r.status_code == 401, (verb, r.text)
                assert "TLS listener" in r.json()["Error"]
                assert r.headers["www-authenticate"] == "Bearer"
                r = c.post(verb, json=body, headers=bearer("a-wrong-token"))
                assert r.status_code == 401 and r.json()["Error"]
            r = c.post("/filter", json=FILTER, headers=bearer(TOKEN))  # the shared token
            assert r.status_code == 200 and r.json()["NodeNames"] == ["n1"]

            r = c.get("/v1/allocations")
            assert r.status_code == 401 and "audit bearer token" in r.json()["detail"]
            assert c.get("/v1/allocations", headers=bearer(TOKEN)).status_code == 401
            r = c.get("/v1/allocations", headers=bearer(AUDIT))
            assert r.status_code == 200 and r.json()["items"] == []

            assert c.post("/admit/pods", json=REVIEW).json()["response"]["allowed"] is True
            assert c.get("/healthz").status_code == 200 and c.get("/readyz").status_code == 200
            for path in ("/metrics", "/openapi.json", "/docs"):
                r = c.get(path)
                assert r.status_code == 404 and "TLS listener" in r.json()["detail"], path
        # the plain listener, from loopback (kube-scheduler's sidecar path): served
        r = httpx.post(serve.url + "/filter", json=FILTER, timeout=30)
        assert r.status_code == 200 and r.json()["NodeNames"] == ["n1"]
        assert httpx.get(serve.url + "/v1/allocations", timeout=30).status_code == 401
        assert httpx.get(serve.url + "/metrics", timeout=30).status_code == 200
    finally:
        serve.stop()


def test_tls_audit_api_is_closed_without_a_configured_token(tmp_path: Path) -> None:
    serve, port, cert = tls_serve(tmp_path, audit=False)
    try:
        with tls_client(port, cert) as c:
            assert c.get("/v1/allocations").status_code == 401
            assert c.get("/v1/allocations", headers=bearer(TOKEN)).status_code == 401
            assert c.get("/v1/chargeback").status_code == 401
    finally:
        serve.stop()


async def _as_peer(app: object, peer: str, path: str, **kw: object) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, client=(peer, 40000))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as c:
        return await c.post(path, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["loopback", "any"])
def test_plain_listener_scheduler_verbs_from_another_pod(
    tmp_path: Path, mode: Literal["loopback", "any"]
) -> None:
    (tmp_path / "token").write_text(TOKEN)
    built = build(
        Settings(
            db=str(tmp_path / "l.db"),
            agent_token_file=str(tmp_path / "token"),
            scheduler_verbs=mode,
        ),
        clock=ManualClock(),
        binder=InProcessBinder(),
    )
    try:
        for verb, body in (("/filter", FILTER), ("/bind", BIND)):
            r = asyncio.run(_as_peer(built.app, "10.1.2.3", verb, json=body))
            if mode == "loopback":
                assert r.status_code == 403 and "loopback" in r.json()["Error"], r.text
            else:
                assert r.status_code == 200
            r = asyncio.run(_as_peer(built.app, "10.1.2.3", verb, json=body, headers=bearer(TOKEN)))
            assert r.status_code == 200, r.text
            for local in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
                assert asyncio.run(_as_peer(built.app, local, verb, json=body)).status_code == 200
    finally:
        built.service.ledger.close()
