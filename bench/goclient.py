"""bench/latency.py's ``--client go``: times the pair with kube-scheduler's own client
code path (bench/goclient/main.go: encoding/json.Marshal of the typed ExtenderArgs,
net/http, json.Decoder into the typed result), so the floor is the floor kube-scheduler
sees, its encoding and decoding of the bodies included.

The Go program is built on first use (the Go toolchain and the k8s.io/api and
k8s.io/kube-scheduler modules the e2e build also uses) into
``${HEADROOM_BENCH_CACHE:-~/.cache/headroom-bench}``, keyed by its sources' hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).resolve().parent / "goclient"


def build() -> Path:
    """The built client, built now if its sources changed since."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((SOURCE / name).read_bytes())
    cache = Path(os.environ.get("HEADROOM_BENCH_CACHE", Path.home() / ".cache/headroom-bench"))
    binary = cache / f"goclient-{digest.hexdigest()[:12]}"
    if not binary.exists():
        print(f"building {SOURCE} -> {binary}", file=sys.stderr)
        cache.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
        subprocess.run(["go", "build", "-o", str(binary), "."], cwd=SOURCE, env=env, check=True)
    return binary


class GoClient:
    """One goclient process over one keep-alive connection, driven line by line."""

    def __init__(self, url: str) -> None:
        # one core for the client, as kube-scheduler has cores of its own: with the
        # default (all cores) its concurrent garbage collector ran on the server's core
        env = {**os.environ, "GOMAXPROCS": os.environ.get("GOMAXPROCS", "1")}
        self._proc = subprocess.Popen(
            [str(build()), url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )

    def _ask(self, command: dict[str, Any]) -> dict[str, float]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(command).encode() + b"\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"goclient exited with {self._proc.wait()}")
        return dict(json.loads(line))

    def nodes(self, nodes: list[dict[str, Any]]) -> None:
        """The Node objects Nodes-mode requests carry, by name (once)."""
        self._ask({"nodes": nodes})

    def pair(
        self, pod: dict[str, Any], names: list[str], mode: str, floor: bool = False
    ) -> tuple[float, float]:
        """filter with ``names``, then prioritize with the nodes it passed: seconds each;
        ``floor``: the same requests to the floor, its replies handled alike."""
        answer = self._ask({"pod": pod, "names": names, "mode": mode, "floor": floor})
        return answer["filter"], answer["prioritize"]

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait()
