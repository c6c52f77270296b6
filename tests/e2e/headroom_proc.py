"""A real ``headroom serve`` process bound to the e2e cluster, and simulated agents."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec

from drivers.agent import build_report
from drivers.simulated import SimulatedDriver
from extender.clock import SystemClock
from extender.simulate.server_thread import free_port

TOKEN = "e2e-agent-token"


@dataclass
class Headroom:
    workdir: Path
    kubeconfig: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    drivers: dict[str, SimulatedDriver] = field(default_factory=dict)
    restarts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, policy: str = "binpack") -> None:
        token = self.workdir / "agent-token"
        token.write_text(TOKEN)
        log = open(self.workdir / f"headroom-{self.restarts}.log", "wb")  # noqa: SIM115
        cmd = [sys.executable, "-m", "extender.cli", "serve", "--host", "127.0.0.1",
               "--port", str(self.port), "--db", str(self.workdir / "ledger.db"),
               "--kubeconfig", str(self.kubeconfig), "--agent-token-file", str(token),
               "--stale-after", "600", "--policy", policy]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"headroom serve exited: {self.log_tail()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"headroom serve not ready: {self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers, as a crashed or evicted pod."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.restarts += 1

    def log_tail(self, n: int = 4000) -> str:
        logs = sorted(self.workdir.glob("headroom-*.log"))
        return "\n".join(p.read_text(errors="replace")[-n:] for p in logs)

    def agent(self, node: str, spec: str, labels: dict[str, str] | None = None) -> SimulatedDriver:
        if node not in self.drivers:
            self.drivers[node] = SimulatedDriver(spec, seed=1, node=node)
        self.report(node, labels)
        return self.drivers[node]

    def report(self, node: str, labels: dict[str, str] | None = None) -> None:
        d = self.drivers[node]
        rep = build_report(d, node, d.attribute, SystemClock(), labels=labels)
        r = httpx.post(self.url + "/v1/reports", content=msgspec.json.encode(rep),
                       headers={"Authorization": f"Bearer {TOKEN}"})
        r.raise_for_status()

    def allocations(self, **params: Any) -> list[dict[str, Any]]:
        r = httpx.get(self.url + "/v1/allocations", params={"limit": 1000, **params})
        r.raise_for_status()
        items: list[dict[str, Any]] = r.json()["items"]
        return items

    def stop(self) -> None:
        self.kill()
