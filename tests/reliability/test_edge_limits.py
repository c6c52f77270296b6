"""Issue 23 F6/F7 over real sockets against a real ``headroom serve``: body limits per
route, the global body budget (with the server's memory read from /proc), and the
connection timeouts and cap. Every wait is a generous bound on a short configured
timeout; nothing asserts how fast anything happened."""

from __future__ import annotations

import functools
import resource
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.serveproc import ServeProc

WAIT = 30.0  # a generous bound on a configured timeout of a few seconds
MIB = 1024 * 1024


@pytest.fixture
def serve(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServeProc]:
    proc = ServeProc(tmp_path, str(tmp_path / "l.db"), list(getattr(request, "param", [])))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    s.settimeout(WAIT)
    return s


def head(s: socket.socket) -> bytes:
    """Read until the end of one response head (or the connection's end)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def status(data: bytes) -> int:
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0


def closed_by_server(s: socket.socket) -> bool:
    """True once the server has closed ``s`` (waits at most WAIT)."""
    try:
        while s.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def test_bind_body_is_bounded_by_its_own_limit(serve: ServeProc) -> None:
    url = serve.url
    r = httpx.post(url + "/bind", content=b"x" * 1_000_000, timeout=WAIT)
    assert r.status_code == 413
    assert r.json() == {"Error": "request body exceeds 65536 bytes (the limit for /bind)"}
    streamed = (b"x" * 65536 for _ in range(16))  # chunked: no Content-Length
    r = httpx.post(url + "/bind", content=streamed, timeout=WAIT)
    assert r.status_code == 413 and "limit for /bind" in r.json()["Error"]
    assert httpx.get(url + "/healthz", timeout=WAIT).json() == {"status": "ok"}
    # each family answers in its own shape
    r = httpx.post(url + "/v1/reports", content=b"x" * (5 * MIB), timeout=WAIT)
    assert r.status_code == 413 and "/v1/reports" in r.json()["detail"]
    r = httpx.post(url + "/admit/pods", content=b"x" * (5 * MIB), timeout=WAIT)
    assert r.status_code == 413 and "/admit/pods" in r.json()["error"]
    # a real binding is far below the limit and still answered
    bind = {"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "n1"}
    r = httpx.post(url + "/bind", json=bind, timeout=WAIT)
    assert r.status_code == 200 and "not seen by filter" in r.json()["Error"]


BUDGET = 64 * MIB
BODY = 15 * 1000 * 1000  # each held twice while read: two fit in BUDGET, three do not


@pytest.mark.parametrize(
    "serve",
    [["--body-budget-bytes", str(BUDGET), "--max-body-bytes", str(16 * MIB)]],
    indirect=True,
)
def test_large_bodies_beyond_the_budget_are_refused_unread(serve: ServeProc) -> None:
    assert serve.proc is not None
    pid = serve.proc.pid
    before = rss_kib(pid, "VmRSS")
    headers = (
        f"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {BODY}\r\nExpect: 100-continue\r\n\r\n"
    ).encode()
    admitted, answers = [], []
    for _ in range(16):  # one at a time: the server reads each head before the next
        s = connect(serve.port)
        s.sendall(headers)
        got = head(s)  # 100 Continue: the app reads the body; 503: refused unread
        answers.append(status(got))
        if status(got) == 100:
            admitted.append(s)
        else:
            got += s.recv(4096)
            assert b"retry-after: 1" in got.lower() and b'{"Error": "too many large' in got
            s.close()
    assert answers.count(100) == 2 and answers.count(503) == 14, answers
    body = b" " * (BODY - 2) + b"{}"

    def send(s: socket.socket) -> None:
        s.sendall(body)

    threads = [threading.Thread(target=send, args=(s,)) for s in admitted]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    for s in admitted:
        assert status(head(s)) in (200, 400)  # read and answered (not 413/503)
        s.close()
    grew_mib = (rss_kib(pid, "VmHWM") - before) / 1024
    # 16 bodies buffered would be ~480 MiB; the budget bounds what is held at once
    assert grew_mib < BUDGET / MIB + 48, grew_mib
    assert httpx.get(serve.url + "/healthz", timeout=WAIT).status_code == 200


@pytest.mark.parametrize(
    "serve",
    [["--idle-timeout", "1", "--header-timeout", "2", "--body-timeout", "2"]],
    indirect=True,
)
def test_idle_and_slow_connections_are_closed(serve: ServeProc) -> None:
    idle = connect(serve.port)  # says nothing at all
    assert closed_by_server(idle)
    slow_head = connect(serve.port)
    slow_head.sendall(b"POST /bind HTTP/1.1\r\nHost: x\r\n")  # and never ends the head
    assert status(head(slow_head)) == 408 and closed_by_server(slow_head)
    slow_body = connect(serve.port)
    slow_body.sendall(b"POST /bind HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    got = head(slow_body) + slow_body.recv(4096)
    assert status(got) == 408 and b'{"Error": "request body not received within 2 s"}' in got
    assert closed_by_server(slow_body)
    kept = connect(serve.port)  # after a response, kept alive only for the idle timeout
    kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status(head(kept)) == 200 and closed_by_server(kept)
    for s in (idle, slow_head, slow_body, kept):
        s.close()


def _low_file_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def test_connection_flood_at_a_low_file_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: 1,200 idle connections against a 1,024 open-file limit. The
    cap (automatic: 1,024 - 384) keeps descriptors free, the oldest idle connections
    make room, /healthz answers, and the log does not flood."""
    monkeypatch.setattr(
        subprocess, "Popen", functools.partial(subprocess.Popen, preexec_fn=_low_file_limit)
    )
    serve = ServeProc(tmp_path, str(tmp_path / "l.db"), ["--idle-timeout", "60"])
    serve.start()
    monkeypatch.undo()
    flood: list[socket.socket] = []
    try:
        for _ in range(1200):
            flood.append(socket.create_connection(("127.0.0.1", serve.port), timeout=WAIT))
        r = httpx.get(serve.url + "/healthz", timeout=WAIT)
        assert r.status_code == 200
        assert serve.proc is not None
        open_fds = len(list(Path(f"/proc/{serve.proc.pid}/fd").iterdir()))
        assert open_fds < 1024 - 64, open_fds
    finally:
        for s in flood:
            s.close()
        serve.stop()
    text = serve.log_tail(10**7)
    assert "out of system resource" not in text
    assert 1 <= text.count("at the connection cap") <= 5  # rate-limited: once per 10 s
