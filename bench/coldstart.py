"""Cold start of ``headroom serve``: seconds to the first 200 from ``/healthz``, and the
first filter at 5,000 nodes after start against the filters that follow it.

    .venv/bin/python bench/coldstart.py [--runs 5] [--nodes 5000] [--filters 20]

Each run is the container's first start after a failover: ``extender/`` and ``drivers/``
copied to a fresh directory, byte-compiled (as ``pip install`` does) and made read-only
(the image's install belongs to root, the server runs as 65532), an empty ``HOME`` and an
empty ``NUMBA_CACHE_DIR``, ``PYTHONDONTWRITEBYTECODE=1``: nothing any earlier run wrote
is there to find. The third-party packages are the virtualenv's, as installed.

Then agents report ``--nodes`` nodes (untimed) and the first filter+prioritize pair of a
pod is timed, followed by ``--filters`` pairs of pods each with a new memory ask (every
node evaluated afresh, as for the first: the fair "warm" comparison), from the same
client over the same connection. ``--nodes 0`` times the start only.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.latency import HttpPairs, pod, report_nodes  # noqa: E402
from extender.core.httpclient import make_client  # noqa: E402
from extender.simulate.server_thread import free_port  # noqa: E402


def installed_copy(tmp: Path) -> Path:
    """The packages as the image installs them: byte-compiled, then read-only."""
    src = tmp / "src"
    for package in ("extender", "drivers"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(src, quiet=1)
    _writable(src, False)
    return src


def _writable(top: Path, on: bool) -> None:
    bits = stat.S_IWUSR
    for path in [top, *top.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode | bits if on else mode & ~(bits | stat.S_IWGRP | stat.S_IWOTH))


def start(tmp: Path, src: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    """``headroom serve`` on a free port; returns it, its URL, and the seconds from
    launch to the first 200 from /healthz."""
    for d in ("home", "numba"):
        (tmp / d).mkdir()
    env = {
        **os.environ,
        "HOME": str(tmp / "home"),
        "NUMBA_CACHE_DIR": str(tmp / "numba"),
        "MPLCONFIGDIR": str(tmp / "home/matplotlib"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": str(src),
    }
    port = free_port()
    cmd = [sys.executable, "-m", "extender.cli", "serve", "--port", str(port)]
    cmd += ["--db", str(tmp / "h.db"), "--stale-after", "3600"]
    cmd += ["--allow-unauthenticated-reports", "--log-level", "error"]
    url = f"http://127.0.0.1:{port}"
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=tmp / "home", env=env)
    while proc.poll() is None:
        try:
            if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                return proc, url, time.perf_counter() - t
        except httpx.TransportError:
            time.sleep(0.005)
    raise RuntimeError(f"headroom serve exited with {proc.returncode}")


def first_filters(url: str, nodes: int, filters: int) -> dict[str, float]:
    """The first filter (and its pair) after start, and the medians of the ``filters``
    after it, seconds."""
    names = [f"node-{i:05d}" for i in range(nodes)]
    with make_client(url, timeout=120) as client:
        report_nodes(client, names)
        pairs = HttpPairs(client)
        first = pairs.pair(pod(0, 4096), names)
        later = [pairs.pair(pod(i, 4096 + 64 * i), names) for i in range(1, filters + 1)]
    return {
        "first filter": first[0],
        "later filters": statistics.median(f for f, _ in later),
        "first pair": sum(first),
        "later pairs": statistics.median(f + p for f, p in later),
    }


def run(nodes: int, filters: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        src = installed_copy(tmp)
        try:
            proc, url, healthz = start(tmp, src)
            try:
                out: dict[str, Any] = {"healthz": healthz}
                if nodes:
                    out.update(first_filters(url, nodes, filters))
                return out
            finally:
                proc.terminate()
                proc.wait()
        finally:
            _writable(src, True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--filters", type=int, default=20)
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        r = run(args.nodes, args.filters)
        runs.append(r)
        print(f"run {i + 1}: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in r.items()))
    print(render(runs))


def render(runs: list[dict[str, Any]]) -> str:
    """Median and range of each figure over the runs, and of first / warm."""
    rows = ["| figure | median | min | max |", "|---|---:|---:|---:|"]
    columns = {k: [r[k] for r in runs] for k in runs[0]}
    for key, label in (("healthz", "to first 200 /healthz, s"),):
        xs = columns[key]
        rows.append(f"| {label} | {statistics.median(xs):.2f} | {min(xs):.2f} | {max(xs):.2f} |")
    for what in ("filter", "pair") if "first filter" in columns else ():
        for key in (f"first {what}", f"later {what}s"):
            xs = [x * 1e3 for x in columns[key]]
            rows.append(
                f"| {key}, ms | {statistics.median(xs):.2f} | {min(xs):.2f} | {max(xs):.2f} |"
            )
        ratios = [r[f"first {what}"] / r[f"later {what}s"] for r in runs]
        rows.append(
            f"| first / later {what}s | {statistics.median(ratios):.2f}x | {min(ratios):.2f}x "
            f"| {max(ratios):.2f}x |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    main()
