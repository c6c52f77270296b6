"""The bind path's kept-alive POST (extender/kube/keepalive.py) against a real HTTPS
server on a socket: the client configuration's URL, trust, client certificate and
token are honoured, connections are reused and replaced when the server drops them,
and a configuration it does not reproduce keeps the Kubernetes client's own pool."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from extender.kube import keepalive
from extender.kube.binder import KubeBinder
from extender.kube.keepalive import KeepAlive
from extender.scheduling.binder import BindError
from extender.wire.clock import ManualClock


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _pki(root: Path, name: str) -> Path:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    d = root / name
    d.mkdir()
    _openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
             "-out", "ca.crt", "-days", "2", "-subj", f"/CN={name}-ca")  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who in ("server", "client"):
        _openssl(d, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key",
                 "-out", f"{who}.csr", "-subj", f"/CN={who}-of-{name}")  # fmt: skip
        _openssl(d, "x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", "san.ext",
                 "-out", f"{who}.crt")  # fmt: skip
    return d


@dataclass
class Seen:
    peer_port: int
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    client_cert: str | None


@dataclass
class Server:
    """An HTTP/1.1 keep-alive HTTPS server recording every POST; it answers 401 to
    tokens it does not accept, and closes a connection idle for ``idle_s``."""

    pki: Path
    require_client_cert: bool = False
    accept_tokens: set[str] = field(default_factory=lambda: {"Bearer t1"})
    idle_s: float = 30.0
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def start(self) -> str:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = outer.idle_s

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                peer: Any = self.connection
                cert = peer.getpeercert()
                subject = dict(x[0] for x in cert["subject"]) if cert else None
                outer.seen.append(
                    Seen(
                        self.client_address[1],
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        subject["commonName"] if subject else None,
                    )
                )
                ok = self.headers.get("Authorization") in outer.accept_tokens
                reply = json.dumps({"kind": "Status", "code": 201 if ok else 401}).encode()
                self.send_response(201 if ok else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(self.pki / "server.crt", self.pki / "server.key")
        if self.require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}"
        return self.url

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _pki(tmp_path_factory.mktemp("pki"), "api")


@pytest.fixture
def server(pki: Path) -> Iterator[Server]:
    s = Server(pki)
    s.start()
    yield s
    s.stop()


def config(host: str, pki: Path, token: str = "t1") -> client.Configuration:
    cfg = client.Configuration()
    cfg.host = host
    cfg.ssl_ca_cert = str(pki / "ca.crt")
    cfg.api_key = {"BearerToken": token}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return cfg


def binding(name: str) -> bytes:
    return json.dumps({"kind": "Binding", "metadata": {"name": name}}).encode()


def test_posts_carry_the_clients_token_under_its_url_prefix_on_one_kept_alive_connection(
    server: Server, pki: Path
) -> None:
    lean = KeepAlive.of(config(server.url + "/k8s/clusters/c1", pki), timeout_s=3.0)
    assert lean is not None
    for i in range(5):
        reply = lean.post(f"/api/v1/namespaces/ml/pods/p{i}/binding", binding(f"p{i}"), {})
        assert reply.status == 201
    assert [s.path for s in server.seen] == [
        f"/k8s/clusters/c1/api/v1/namespaces/ml/pods/p{i}/binding" for i in range(5)
    ]
    assert {s.headers["authorization"] for s in server.seen} == {"Bearer t1"}
    assert [s.body["metadata"]["name"] for s in server.seen] == [f"p{i}" for i in range(5)]
    assert len({s.peer_port for s in server.seen}) == 1  # one connection for all five


def test_a_connection_the_server_closed_while_idle_is_replaced_before_the_next_post(
    pki: Path,
) -> None:
    s = Server(pki, idle_s=0.2)
    url = s.start()
    try:
        lean = KeepAlive.of(config(url, pki), timeout_s=3.0)
        assert lean is not None
        assert lean.post("/a", binding("a"), {}).status == 201
        time.sleep(0.8)  # the server closes the idle connection meanwhile
        assert lean.post("/b", binding("b"), {}).status == 201
        assert len({x.peer_port for x in s.seen}) == 2
    finally:
        s.stop()


def test_a_401_reads_the_token_again_through_the_clients_hook_and_retries_once(
    server: Server, pki: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config(server.url, pki, token="t0")
    server.accept_tokens = {"Bearer t1"}
    reads: list[str] = []
    clock = ManualClock()

    def hook(c: client.Configuration) -> None:  # the client's refresh, as a loader sets it
        c.api_key = {"BearerToken": "t1" if reads else "t0"}
        reads.append(c.api_key["BearerToken"])

    cfg.refresh_api_key_hook = hook  # type: ignore[assignment]  # the stubs type it None
    lean = KeepAlive(cfg, timeout_s=3.0, clock=clock)
    assert lean.post("/a", binding("a"), {}).status == 201
    assert [x.headers["authorization"] for x in server.seen] == ["Bearer t0", "Bearer t1"]
    assert reads == ["t0", "t1"]
    clock.advance(keepalive.TOKEN_REFRESH_S / 2)  # within the refresh period: the token is kept
    assert lean.post("/b", binding("b"), {}).status == 201
    assert reads == ["t0", "t1"]
    clock.advance(keepalive.TOKEN_REFRESH_S)  # past it: read again through the hook
    assert lean.post("/c", binding("c"), {}).status == 201
    assert len(reads) == 3
    server.accept_tokens = set()  # a token refused again after the retry: the 401 stands
    assert lean.post("/d", binding("d"), {}).status == 401


def test_the_client_certificate_is_presented_and_an_untrusted_server_refused(
    pki: Path, tmp_path: Path
) -> None:
    s = Server(pki, require_client_cert=True)
    url = s.start()
    try:
        cfg = config(url, pki)
        cfg.cert_file, cfg.key_file = str(pki / "client.crt"), str(pki / "client.key")
        lean = KeepAlive.of(cfg, timeout_s=3.0)
        assert lean is not None
        assert lean.post("/a", binding("a"), {}).status == 201
        assert s.seen[-1].client_cert == "client-of-api"

        other = _pki(tmp_path, "other")  # a CA that did not sign the server's certificate
        stranger = KeepAlive.of(config(url, other), timeout_s=3.0)
        assert stranger is not None
        with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            stranger.post("/b", binding("b"), {})
        unverified = config(url, other)
        unverified.verify_ssl = False
        unverified.cert_file, unverified.key_file = cfg.cert_file, cfg.key_file
        plain = KeepAlive.of(unverified, timeout_s=3.0)
        assert plain is not None and plain.post("/c", binding("c"), {}).status == 201
    finally:
        s.stop()


def test_configurations_it_does_not_reproduce_bind_through_the_clients_own_pool(
    server: Server, pki: Path
) -> None:
    proxied = config(server.url, pki)
    proxied.proxy = "http://proxy.example:3128"
    assert KeepAlive.of(proxied, timeout_s=3.0) is None

    named = config(server.url.replace("127.0.0.1", "localhost"), pki)
    named.tls_server_name = "localhost"
    binder = KubeBinder(client.ApiClient(named))
    assert binder.lean is None
    binder.bind("ml", "p1", "uid-1", "node-1", {"headroom.dev/gpu-uuids": "GPU-1"})
    seen = server.seen[-1]
    assert seen.path == "/api/v1/namespaces/ml/pods/p1/binding"
    assert seen.body["metadata"] == {
        "name": "p1",
        "namespace": "ml",
        "uid": "uid-1",
        "annotations": {"headroom.dev/gpu-uuids": "GPU-1"},
    }
    assert seen.headers["authorization"] == "Bearer t1"


def test_the_binder_answers_an_unreachable_api_server_by_name_within_its_deadline(
    pki: Path,
) -> None:
    s = Server(pki)
    url = s.start()
    s.stop()  # nothing listens there now
    binder = KubeBinder(client.ApiClient(config(url, pki)), deadline_s=0.5)
    assert binder.lean is not None
    t0 = time.monotonic()
    with pytest.raises(BindError, match="ml/p1: API server unreachable"):
        binder.bind("ml", "p1", "uid-1", "node-1", {})
    assert time.monotonic() - t0 < 5
