"""A real ``headroom serve`` process that a test can SIGKILL and start again on the same
port and ledger (standalone, or bound to the e2e cluster with --kubeconfig), and
simulated agents reporting to it. Used by tests/reliability and tests/e2e."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import msgspec

from drivers.agent.loop import build_report
from drivers.gpu.simulated import SimulatedDriver
from extender.simulate.server_thread import free_port
from extender.wire.clock import SystemClock

TOKEN = "test-agent-token"
LABELS = {
    "node.kubernetes.io/instance-type": "g5.12xlarge",
    "karpenter.sh/capacity-type": "on-demand",
}


@dataclass
class ServeProc:
    workdir: Path
    db: str
    extra: list[str] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    drivers: dict[str, SimulatedDriver] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        token = self.workdir / "agent-token"
        token.write_text(TOKEN)
        log = open(self.workdir / f"serve-{self.starts}.log", "wb")  # noqa: SIM115
        self.starts += 1
        cmd = [
            sys.executable,
            "-m",
            "extender.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--db",
            self.db,
            "--agent-token-file",
            str(token),
            *self.extra,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"headroom serve exited: {self.log_tail()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"headroom serve not ready: {self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers run, as for an OOM kill or a lost node."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, n: int = 4000) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-n:] for p in sorted(self.workdir.glob("serve-*.log"))
        )

    def report(
        self, node: str, spec: str = "4xA10G:24Gi", labels: dict[str, str] | None = LABELS
    ) -> httpx.Response:
        """Send a report from the node's simulated agent (made on first use from ``spec``).
        ``labels=None``: the node's facts come from the cluster (the Node watch) only."""
        if node not in self.drivers:
            self.drivers[node] = SimulatedDriver(spec, seed=1, node=node)
        d = self.drivers[node]
        rep = build_report(d, node, d.attribute, SystemClock(), labels=labels)
        r = httpx.post(
            self.url + "/v1/reports",
            content=msgspec.json.encode(rep),
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        )
        r.raise_for_status()
        return r
