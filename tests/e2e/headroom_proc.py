"""``headroom serve`` bound to the e2e cluster (watches and binds through the real API)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from drivers.gpu.simulated import SimulatedDriver
from tests.serveproc import ServeProc


class Headroom(ServeProc):
    def __init__(self, workdir: Path, kubeconfig: Path, policy: str = "binpack") -> None:
        super().__init__(
            workdir,
            str(workdir / "ledger.db"),
            ["--kubeconfig", str(kubeconfig), "--stale-after", "600", "--policy", policy],
        )

    def agent(self, node: str, spec: str) -> SimulatedDriver:
        """The node's simulated agent, after its first report (facts: from the Node)."""
        self.report(node, spec, labels=None)
        return self.drivers[node]

    def allocations(self, **params: Any) -> list[dict[str, Any]]:
        r = httpx.get(self.url + "/v1/allocations", params={"limit": 1000, **params})
        r.raise_for_status()
        items: list[dict[str, Any]] = r.json()["items"]
        return items
