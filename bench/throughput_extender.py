"""The extender side of bench/throughput.py: ``headroom serve`` bound to the e2e cluster,
one simulated agent report per node, and the spans it measured.

The process is this worktree's code (``python -m``, with the repository root first on
PYTHONPATH), started through bench/throughput_spans.py unless ``spans=False``. Agents
report once, before the timed run, with ``--stale-after`` long enough that the reports
stay fresh through it: the run measures scheduling, not report intake.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec

from bench.throughput_cluster import pin
from drivers.agent.loop import build_report
from drivers.gpu.simulated import SimulatedDriver
from extender.wire.clock import SystemClock
from tests.e2e.cluster import REPO_ROOT, free_port

AGENT_TOKEN = "bench-agent-token"  # the shared agent token, as tests/serveproc.py uses
A10G_SPEC = "4xA10G:24Gi"


@dataclass
class Extender:
    workdir: Path
    kubeconfig: Path
    spans: bool = True
    cpus: set[int] | None = None  # pinned there (its own CPUs, as in its own pod)
    db: str | None = None  # a postgresql:// DSN; None: a SQLite file in the work directory
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def spans_file(self) -> Path:
        return self.workdir / "extender-spans.json"

    @property
    def log(self) -> Path:
        return self.workdir / "logs" / "headroom-serve.log"

    def start(self) -> None:
        token = self.workdir / "agent-token"
        token.write_text(AGENT_TOKEN)
        module = "bench.throughput_spans" if self.spans else "extender.cli"
        cmd = [
            sys.executable, "-m", module, "serve",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--db", self.db or str(self.workdir / "ledger.db"),
            "--agent-token-file", str(token),
            "--kubeconfig", str(self.kubeconfig),
            "--stale-after", "7200",
        ]  # fmt: skip
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
            "HEADROOM_BENCH_SPANS": str(self.spans_file),
        }
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        pin(self.proc.pid, self.cpus)
        deadline = time.monotonic() + 180  # a cold numba cache compiles at start
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"headroom serve exited:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"headroom serve not ready:\n{self.log_tail()}")

    def report_all(self, nodes: list[str], progress: Callable[[str], None]) -> None:
        """One report per node from its simulated agent (facts from the Node object)."""
        start = time.monotonic()
        clock = SystemClock()
        with httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {AGENT_TOKEN}"},
            timeout=30,
        ) as client:

            def one(node: str) -> None:
                d = SimulatedDriver(A10G_SPEC, seed=1, node=node)
                rep = build_report(d, node, d.attribute, clock, labels=None)
                r = client.post("/v1/reports", content=msgspec.json.encode(rep))
                r.raise_for_status()

            with ThreadPoolExecutor(max_workers=8) as pool:
                for i, _ in enumerate(pool.map(one, nodes), 1):
                    if i % 1000 == 0 or i == len(nodes):
                        progress(f"  reports: {i}/{len(nodes)} ({time.monotonic() - start:.0f} s)")

    def reset_spans(self) -> None:
        if self.spans and self.proc is not None:
            os.kill(self.proc.pid, signal.SIGUSR2)

    def read_spans(self, timeout: float = 30) -> dict[str, Any]:
        """Ask the process to write its spans; {} when run without them."""
        if not self.spans or self.proc is None:
            return {}
        self.spans_file.unlink(missing_ok=True)
        os.kill(self.proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.spans_file.exists():
                data: dict[str, Any] = json.loads(self.spans_file.read_text())
                return data
            time.sleep(0.2)
        raise RuntimeError("the extender did not write its spans")

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
