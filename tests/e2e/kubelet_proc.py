"""Processes for the device plugin e2e: kubelet's device manager (the Go harness in
tests/e2e/kubeletdm) and ``headroom device-plugin``, sharing one device-plugins directory.

Unix socket paths are limited to 107 bytes, so the shared directory is a short one under
/tmp rather than pytest's tmp_path; logs go to the test's tmp_path.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def build_harness(log: Path) -> Path:
    """Build (or take from the cache) the kubeletdm binary; its path."""
    with open(log, "ab") as err:
        out = subprocess.run(
            [str(HERE / "build_kubeletdm.sh")], stdout=subprocess.PIPE, stderr=err, check=True
        )
    return Path(out.stdout.decode().strip().splitlines()[-1])


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@dataclass
class Kubelet:
    """kubelet's device manager for one node; ``admissions()`` is what it gave whom."""

    binary: Path
    socket_dir: Path
    kubeconfig: Path
    node: str
    logs: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def results(self) -> Path:
        return self.logs / f"kubeletdm-{self.node}.jsonl"

    @property
    def pod_resources(self) -> Path:
        """kubelet's pod-resources socket, where a node has it relative to device-plugins."""
        return self.socket_dir.parent / "pod-resources" / "kubelet.sock"

    def start(self) -> None:
        self.pod_resources.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.logs / f"kubeletdm-{self.node}-{self.starts}.log", "wb")  # noqa: SIM115
        self.starts += 1
        self.proc = subprocess.Popen(
            [
                str(self.binary),
                "--socket-dir",
                str(self.socket_dir),
                "--kubeconfig",
                str(self.kubeconfig),
                "--node",
                self.node,
                "--results",
                str(self.results),
                "--pod-resources-socket",
                str(self.pod_resources),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_for(lambda: (self.socket_dir / "kubelet.sock").is_socket(), "kubelet.sock")

    def stop(self) -> None:
        _stop(self.proc)

    def admissions(self) -> list[dict[str, Any]]:
        if not self.results.exists():
            return []
        return [json.loads(line) for line in self.results.read_text().splitlines() if line]

    def admission(self, pod: str, after: int = 0, timeout: float = 30) -> dict[str, Any]:
        """The first admission of ``namespace/name`` past the first ``after`` lines."""
        found: list[dict[str, Any]] = []

        def seen() -> bool:
            found[:] = [a for a in self.admissions()[after:] if a["pod"] == pod]
            return bool(found)

        wait_for(seen, f"admission of {pod}", timeout)
        return found[0]


@dataclass
class Plugin:
    """``headroom device-plugin`` with the simulated driver, against the e2e API."""

    kubelet_dir: Path
    kubeconfig: Path
    node: str
    spec: str
    logs: Path
    seed: int = 1
    slots: int = 2
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    extra: list[str] = field(default_factory=list)

    def start(self) -> None:
        log = open(self.logs / f"device-plugin-{self.node}-{self.starts}.log", "wb")  # noqa: SIM115
        self.starts += 1
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "extender.cli",
                "device-plugin",
                "--node",
                self.node,
                "--driver",
                "simulated",
                "--simulated-gpus",
                self.spec,
                "--seed",
                str(self.seed),
                "--slots-per-gpu",
                str(self.slots),
                "--kubelet-dir",
                str(self.kubelet_dir),
                "--kubeconfig",
                str(self.kubeconfig),
                "--log-level",
                "debug",
                *self.extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.logs,
        )

    def stop(self) -> None:
        _stop(self.proc)

    def wait_registered(self, timeout: float = 90) -> None:
        """Until this start's plugin has registered with kubelet (a loaded machine can
        take longer to start it than kubelet waits for a resource before admitting)."""
        log = self.logs / f"device-plugin-{self.node}-{self.starts - 1}.log"
        wait_for(
            lambda: "registered nvidia.com/gpu with kubelet" in log.read_text(errors="replace"),
            f"device plugin of {self.node} registered",
            timeout,
        )


def wait_for(cond: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
