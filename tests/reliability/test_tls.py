"""TLS: ``headroom serve --tls-port`` waits for its certificate, serves the API and the
webhook over TLS, and picks up a rotated certificate without a restart; the agent's
/metrics over TLS likewise. Certificates are made with the openssl CLI."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter

from drivers.agent.server import MetricsServer
from extender.simulate.server_thread import free_port
from extender.wire.tls import CertReloader
from tests.serveproc import ServeProc


def make_cert(folder: Path, cn: str) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "tls.crt", folder / "tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            f"/CN={cn}",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def install(src: tuple[Path, Path], dst: tuple[Path, Path]) -> None:
    """Replace the served pair the way the kubelet updates a Secret: atomic renames."""
    for s, d in zip(src, dst, strict=True):
        tmp = d.with_suffix(".new")
        tmp.write_bytes(s.read_bytes())
        os.replace(tmp, d)


def served_cn(port: int) -> str | None:
    """The CN of the certificate a fresh TLS connection to ``port`` is shown, or None."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=2) as raw,
            ctx.wrap_socket(raw) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except OSError:
        return None
    assert der is not None
    pem = ssl.DER_cert_to_PEM_cert(der)
    out = subprocess.run(
        ["openssl", "x509", "-noout", "-subject"],
        input=pem.encode(),
        capture_output=True,
        check=True,
    ).stdout.decode()
    return out.strip().rsplit("=", 1)[-1].strip()


def eventually(probe: object, want: object, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = probe()  # type: ignore[operator]
        if got == want:
            return
        time.sleep(0.1)
    pytest.fail(f"{what}: still {got!r}, wanted {want!r}")


def test_serve_waits_for_the_certificate_then_reloads_it(tmp_path: Path) -> None:
    first = make_cert(tmp_path / "a", "headroom-first")
    second = make_cert(tmp_path / "b", "headroom-second")
    live = (tmp_path / "live" / "tls.crt", tmp_path / "live" / "tls.key")
    live[0].parent.mkdir()
    tls_port = free_port()
    serve = ServeProc(
        tmp_path,
        str(tmp_path / "l.db"),
        [
            "--tls-port",
            str(tls_port),
            "--tls-cert-file",
            str(live[0]),
            "--tls-key-file",
            str(live[1]),
        ],
    )
    serve.start()  # no certificate yet: plain HTTP serves, TLS waits
    try:
        assert served_cn(tls_port) is None
        install(first, live)
        eventually(lambda: served_cn(tls_port), "headroom-first", "TLS listener after cert")
        ctx = ssl.create_default_context(cafile=str(first[0]))
        with httpx.Client(base_url=f"https://127.0.0.1:{tls_port}", verify=ctx) as c:
            assert c.get("/healthz").json() == {"status": "ok"}
            review = {
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
            r = c.post("/admit/pods", json=review)
            assert r.status_code == 200 and r.json()["response"]["uid"] == "r1"
        install(second, live)  # rotation: no restart
        eventually(lambda: served_cn(tls_port), "headroom-second", "rotated certificate")
        assert serve.proc is not None and serve.proc.poll() is None
        assert httpx.get(serve.url + "/healthz").status_code == 200  # plain port unaffected
    finally:
        serve.stop()


def test_half_rotated_pair_keeps_the_last_good_certificate(tmp_path: Path) -> None:
    first = make_cert(tmp_path / "a", "one")
    second = make_cert(tmp_path / "b", "two")
    live = (tmp_path / "tls.crt", tmp_path / "tls.key")
    install(first, live)
    reloader = CertReloader(str(live[0]), str(live[1]), min_check_s=0)
    install((second[0], first[1]), live)  # new cert, old key: does not load
    assert reloader.maybe_reload() is False
    install(second, live)
    assert reloader.maybe_reload() is True and reloader.reloads == 1


def test_agent_metrics_over_tls(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path / "m", "agent-metrics")
    registry = CollectorRegistry()
    Counter("headroom_agent_test", "x", registry=registry).inc()
    server = MetricsServer(
        registry, lambda: True, 0, host="127.0.0.1", tls=CertReloader(str(cert), str(key))
    ).start()
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        r = httpx.get(f"https://127.0.0.1:{server.port}/metrics", verify=ctx)
        assert r.status_code == 200 and "headroom_agent_test_total 1.0" in r.text
        with pytest.raises(httpx.HTTPError):  # plain HTTP is not answered
            httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=3)
        # a client that connects and says nothing does not block scrapes
        idle = socket.create_connection(("127.0.0.1", server.port))
        try:
            done = threading.Event()

            def scrape() -> None:
                httpx.get(f"https://127.0.0.1:{server.port}/healthz", verify=ctx)
                done.set()

            threading.Thread(target=scrape, daemon=True).start()
            assert done.wait(8)
        finally:
            idle.close()
    finally:
        server.stop()
