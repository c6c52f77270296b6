"""The README's standalone commands work as written: ``headroom serve`` with the token
file, ``headroom agent`` with the same token, and the extender then places a pod on the
agent's node. Without a token, ``serve`` says at start that every report will be refused."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import msgspec

from tests.e2e.cluster import free_port
from tests.support import gpu_pod

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_commands() -> list[list[str]]:
    """The ``headroom`` command lines of the README's standalone block, continuation
    lines joined, ``.venv/bin/headroom`` run as this interpreter's ``extender.cli``."""
    text = README.read_text()
    block = text.split("Standalone, on one machine", 1)[1].split("```bash", 1)[1]
    block = block.split("```", 1)[0].replace("\\\n", " ")
    lines = [ln for ln in block.splitlines() if ln.startswith(".venv/bin/headroom")]
    return [[sys.executable, "-m", "extender.cli", *shlex.split(ln)[1:]] for ln in lines]


def _with_port(cmd: list[str], port: int) -> list[str]:
    return [re.sub(r"\b8888\b", str(port), a) for a in cmd]


def _wait(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"serve not ready: {log.read_text()[-2000:]}")


def test_the_readme_standalone_commands_report_and_schedule(tmp_path: Path) -> None:
    serve_cmd, agent_cmd = readme_commands()
    (tmp_path / "agent-token").write_text("a-token-for-this-test\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve_log, agent_log = tmp_path / "serve.log", tmp_path / "agent.log"
    with open(serve_log, "wb") as out:
        serve = subprocess.Popen(_with_port(serve_cmd, port), cwd=tmp_path, stdout=out, stderr=out)
    agent = None
    try:
        _wait(url, serve, serve_log)
        with open(agent_log, "wb") as out:
            agent = subprocess.Popen(
                _with_port(agent_cmd, port), cwd=tmp_path, stdout=out, stderr=out
            )
        args = {"Pod": gpu_pod("p", memory="8Gi"), "Nodes": None, "NodeNames": ["gpu-1"]}
        deadline = time.monotonic() + 60
        passing: list[str] = []
        while time.monotonic() < deadline and not passing:
            reply = httpx.post(url + "/filter", content=msgspec.json.encode(args)).json()
            passing = reply["NodeNames"] or []
            time.sleep(0.2)
        assert passing == ["gpu-1"], agent_log.read_text()[-2000:]
        assert "401" not in agent_log.read_text()
    finally:
        for p in (agent, serve):
            if p is not None:
                p.terminate()
                p.wait(10)


def test_serve_without_a_token_says_reports_will_be_refused(tmp_path: Path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "extender.cli", "serve", "--port", str(port), "--db", "x.db"]
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        serve = subprocess.Popen(cmd, cwd=tmp_path, stdout=out, stderr=out)
    try:
        _wait(f"http://127.0.0.1:{port}", serve, log)
        assert "every POST /v1/reports will be refused (401)" in log.read_text()
    finally:
        serve.terminate()
        serve.wait(10)
