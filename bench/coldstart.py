"""Cold start of ``headroom serve``: seconds to the first 200 from ``/healthz``, and the
first filter at 5,000 nodes after start against the filters that follow it.

    .venv/bin/python bench/coldstart.py [--runs 5] [--nodes 5000] [--filters 20] [--in-process]

Each run is the container's first start after a failover: ``extender/`` and ``drivers/``
copied to a fresh directory, byte-compiled (as ``pip install`` does) and made read-only
(the image's install belongs to root, the server runs as 65532), an empty ``HOME`` and an
empty ``NUMBA_CACHE_DIR``, ``PYTHONDONTWRITEBYTECODE=1``: nothing any earlier run wrote
is there to find. The third-party packages are the virtualenv's, as installed.

Then agents report ``--nodes`` nodes (untimed) and the first filter+prioritize pair of a
pod is timed, followed by ``--filters`` pairs of pods each with a new memory ask (every
node evaluated afresh, as for the first: the fair "warm" comparison), from the same
client over the same connection. ``--nodes 0`` times the start only.

``--in-process``: each run a fresh Python process that builds the app as ``headroom
serve`` does (``wiring.build``, ``tune_runtime``, the start-up warm-up) and sends the
same reports and pairs through httpx's ASGI transport: the server's own first-filter
cost without the HTTP transport's (no start-up time).
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import logging
import os
import random
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
import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.latency import LABELS, HttpPairs, body_for, pod, report_nodes  # noqa: E402
from drivers.agent.loop import build_report  # noqa: E402
from drivers.gpu.simulated import SimulatedDriver  # noqa: E402
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


def in_process(nodes: int, filters: int) -> dict[str, Any]:
    """One ``--in-process`` run, in a Python process of its own."""
    cmd = [sys.executable, __file__, "--nodes", str(nodes), "--filters", str(filters)]
    done = subprocess.run([*cmd, "--child"], capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


async def child(nodes: int, filters: int) -> dict[str, float]:
    """The app as ``headroom serve`` builds and warms it, called in this process."""
    from extender.core.runtime import tune_runtime
    from extender.settings import Settings
    from extender.wire.clock import SystemClock
    from extender.wiring import build

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(db=f"{tmp}/h.db", stale_after=3600, allow_unauthenticated_reports=True)
        built = build(settings)
        tune_runtime()
        try:  # as serve() does; absent in code from before it (a "before" figure)
            from extender.http.warmup import warm_up
        except ImportError:
            pass
        else:
            await warm_up(built.app, built.service)
        transport = httpx.ASGITransport(app=built.app, client=("127.0.0.1", 0))
        async with httpx.AsyncClient(transport=transport, base_url="http://headroom") as client:
            names, clock = [f"node-{i:05d}" for i in range(nodes)], SystemClock()
            for i in random.Random(11).sample(range(nodes), nodes):  # as report_nodes
                d = SimulatedDriver("4xA10G:24Gi", seed=i, node=names[i], clock=clock)
                for j, uuid in enumerate(d.gpu_uuids[: i % 4]):
                    d.start_process(f"pod-{i}-{j}", uuid, 2048 * (1 + (i + j) % 8))
                labels = {**LABELS, "karpenter.sh/capacity-type": "spot" if i % 2 else "on-demand"}
                report = build_report(d, names[i], d.attribute, clock, labels=labels)
                sent = await client.post("/v1/reports", content=msgspec.json.encode(report))
                sent.raise_for_status()
            times = [await _pair(client, pod(i, 4096 + 64 * i), names) for i in range(filters + 1)]
        built.service.writer.close()  # its writes done before the ledger closes
        built.service.ledger.close()
    later = times[1:]
    return {
        "first filter": times[0][0],
        "later filters": statistics.median(f for f, _ in later),
        "first pair": sum(times[0]),
        "later pairs": statistics.median(f + p for f, p in later),
    }


async def _pair(client: httpx.AsyncClient, pod_: dict[str, Any], names: list[str]) -> list[float]:
    """filter, then prioritize with the nodes it passed: seconds each."""
    spent, body = [], body_for(pod_, names, None)
    for verb in ("/filter", "/prioritize"):
        t = time.perf_counter()
        reply = await client.post(verb, content=body, headers={"Content-Type": "application/json"})
        spent.append(time.perf_counter() - t)
        reply.raise_for_status()
        if verb == "/filter":  # kube-scheduler's prioritize gets the nodes filter passed
            body = body_for(pod_, reply.json()["NodeNames"] or [], None)
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--filters", type=int, default=20)
    ap.add_argument("--in-process", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        logging.disable(logging.WARNING)  # the simulated agents' pods have no grants
        print(json.dumps(asyncio.run(child(args.nodes, args.filters))))
        return
    runs = []
    for i in range(args.runs):
        measure = in_process if args.in_process else run
        r = measure(args.nodes, args.filters)
        runs.append(r)
        print(f"run {i + 1}: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in r.items()))
    print(render(runs))


def render(runs: list[dict[str, Any]]) -> str:
    """Median and range of each figure over the runs, and of first / warm."""
    rows = ["| figure | median | min | max |", "|---|---:|---:|---:|"]
    columns = {k: [r[k] for r in runs] for k in runs[0]}
    for key, label in (("healthz", "to first 200 /healthz, s"),) if "healthz" in columns else ():
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
