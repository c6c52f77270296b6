"""The README's standalone walk-through works as written: ``headroom serve`` with the
token file, two ``headroom agent`` with the same token, then the second block exactly as
printed (a pod filtered and bound with curl, ``headroom top``, the chargeback). Without a
token, ``serve`` says at start that every report will be refused."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.e2e.cluster import free_port

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_blocks() -> list[list[str]]:
    """The command lines of the README's two standalone blocks, continuation lines
    joined."""
    text = README.read_text().split("Standalone, on one machine", 1)[1]
    blocks = []
    for part in text.split("```bash")[1:3]:
        block = part.split("```", 1)[0].replace("\\\n", " ")
        blocks.append([ln for ln in block.splitlines() if ln.strip()])
    return blocks


def as_argv(line: str) -> list[str]:
    """A ``.venv/bin/headroom ...`` line as this interpreter's ``extender.cli``."""
    return [sys.executable, "-m", "extender.cli", *shlex.split(line)[1:]]


def readme_commands() -> list[list[str]]:
    """The ``headroom`` command lines of the first block (serve, then the agents)."""
    return [as_argv(ln) for ln in readme_blocks()[0] if ln.startswith(".venv/bin/headroom")]


def _with_port(cmd: list[str], port: int) -> list[str]:
    """The command on this test's ports: the extender's, and a free one per agent."""
    ports = {"8888": str(port), "9402": str(free_port()), "9403": str(free_port())}
    return [re.sub(r"\b(8888|9402|9403)\b", lambda m: ports[m.group(1)], a) for a in cmd]


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


def test_the_readme_walk_through_reports_schedules_and_bills(tmp_path: Path) -> None:
    serve_cmd, *agent_cmds = readme_commands()
    assert len(agent_cmds) == 2
    (tmp_path / "agent-token").write_text("a-token-for-this-test\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    logs = [tmp_path / f"{i}.log" for i in range(3)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(logs[0], "wb") as out:
            procs.append(
                subprocess.Popen(_with_port(serve_cmd, port), cwd=tmp_path, stdout=out, stderr=out)
            )
        _wait(url, procs[0], logs[0])
        for cmd, log in zip(agent_cmds, logs[1:], strict=True):
            with open(log, "wb") as out:
                procs.append(
                    subprocess.Popen(_with_port(cmd, port), cwd=tmp_path, stdout=out, stderr=out)
                )
        _wait_for_nodes(url, {"gpu-1", "gpu-2"}, logs)
        outputs = [_run(line, port, tmp_path) for line in readme_blocks()[1]]
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(10)
    filtered, bound, top, bill = outputs
    assert json.loads(filtered)["NodeNames"] == ["gpu-2"]  # the cheaper GiB-hour
    assert json.loads(bound) == {"Error": ""}
    gpu_lines = [ln.split() for ln in top.splitlines() if ln.startswith(("gpu-1", "gpu-2"))]
    assert [ln[0] for ln in gpu_lines] == ["gpu-1", "gpu-2"]
    assert "8192" in top and top.splitlines()[-1].startswith("2 node(s), 5 GPU(s)")
    ml = [ln.split() for ln in bill.splitlines() if ln.startswith("ml ")]
    assert ml and ml[0][1] == "1"  # one allocation, billed to namespace ml, at a price
    assert "unpriced" not in bill and "UNPRICED" not in bill
    # no report refused for its token ("report dropped", reason http_401); a bare "401"
    # also matched the agent's random metrics port in its start line (e.g. 40159)
    assert all('"http_401"' not in log.read_text() for log in logs[1:])
    said = logs[0].read_text()
    assert said.count("agent reports are authenticated by the shared token in agent-token") == 1
    assert "a-token-for-this-test" not in said  # the file is named, the token never


def _wait_for_nodes(url: str, names: set[str], logs: list[Path]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        seen = {n["name"] for n in httpx.get(url + "/v1/nodes").json()["items"]}
        if seen >= names:
            return
        time.sleep(0.2)
    raise AssertionError("agents never reported: " + logs[1].read_text()[-2000:])


def _run(line: str, port: int, cwd: Path) -> str:
    """One README line as written (curl through bash; headroom as this interpreter)."""
    line = re.sub(r"\b8888\b", str(port), line)
    if line.startswith(".venv/bin/headroom"):
        proc = subprocess.run(as_argv(line), cwd=cwd, capture_output=True, text=True, timeout=60)
    else:
        proc = subprocess.run(
            ["bash", "-c", line], cwd=cwd, capture_output=True, text=True, timeout=60
        )
    assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
    return proc.stdout


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
