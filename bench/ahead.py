"""Plans made ahead, through the real kube-scheduler: do they reach the filter in time?

bench/latency.py --announce stands in for kube-scheduler with a fixed lead. Here the
real one schedules (the e2e control plane, tests/e2e/cluster.py, with the shipped
configuration, as bench/throughput.py runs it): N Ready nodes of 4 GPUs, ``headroom
serve`` reported by one simulated agent per node, and pods created one at a time, each
asking one GPU with a memory share no pod before it asked (a shape not seen before),
the next once the last is bound. Run twice, plans made ahead and not
(``HEADROOM_PLAN_AHEAD=0``); printed: the passes over every candidate made inside
kube-scheduler's wait and ahead of it, and the filter as kube-scheduler waited for it
(its time in the extender, bench/throughput_spans.py).

    PYTHONPATH=. .venv/bin/python -m bench.ahead --nodes 5000 --pods 100
    .venv/bin/python bench/ahead.py --nodes 5000 --pods 100  (the same)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script, too

from bench.throughput_cluster import (  # noqa: E402
    Api,
    BindWatch,
    create_nodes,
    delete_pods,
    make_namespace,
    start_scheduler,
)
from bench.throughput_extender import Extender  # noqa: E402
from tests.e2e.cluster import ControlPlane, build_binaries  # noqa: E402

SETTINGS = {"ahead": "4", "off": "0"}  # HEADROOM_PLAN_AHEAD


def say(message: str) -> None:
    print(message, flush=True)


def pod(name: str, memory_mib: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": {"headroom.dev/gpu-memory": f"{memory_mib}Mi"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def passes(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=30).text
    found = re.findall(r'^headroom_scheduling_passes_total\{when="(\w+)"\} (\S+)$', text, re.M)
    return {when: float(count) for when, count in found}


def one_at_a_time(
    api: Api, ns: str, prefix: str, count: int, first_mib: int, timeout: float = 60
) -> None:
    """Each pod created once the one before is bound."""
    watch = BindWatch(api, ns)
    watch.start()
    try:
        for i in range(count):
            name = f"{prefix}{i:04d}"
            api.call("POST", f"/api/v1/namespaces/{ns}/pods", pod(name, first_mib + 8 * i))
            deadline = time.monotonic() + timeout
            while name not in watch.bound:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{ns}/{name} was not bound in {timeout:.0f} s")
                time.sleep(0.002)
    finally:
        watch.stop()


def run(
    setting: str, plane: ControlPlane, api: Api, nodes: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    workdir = plane.workdir / setting
    workdir.mkdir()
    os.environ["HEADROOM_PLAN_AHEAD"] = SETTINGS[setting]  # read by the extender it starts
    extender = Extender(workdir, plane.kubeconfig)
    sched = None
    try:
        extender.start()
        extender.report_all(nodes, say)
        sched = start_scheduler(
            plane, f"kube-scheduler-{setting}", extender.url, args.qps, args.burst
        )
        ns = f"ahead-{setting}"
        make_namespace(api, ns)
        one_at_a_time(api, ns, "first", 1, 1024)  # a first filter: a list to plan for
        before = passes(extender.url)
        extender.reset_spans()
        say(f"[{setting}] {args.pods} pods, one at a time")
        one_at_a_time(api, ns, "p", args.pods, 2048)
        after = passes(extender.url)
        filters = sorted(extender.read_spans()["spans"]["http /filter"])
        delete_pods(api, ns)
    finally:
        if sched is not None:
            sched.stop()
        extender.stop()
        os.environ.pop("HEADROOM_PLAN_AHEAD", None)
    return {
        "setting": setting,
        "cycle": after["cycle"] - before["cycle"],
        "ahead": after["ahead"] - before["ahead"],
        "filters": len(filters),
        "p50": statistics.median(filters) * 1e3,
        "p99": filters[min(len(filters) - 1, round(0.99 * (len(filters) - 1)))] * 1e3,
        "mean": statistics.fmean(filters) * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1, help="the two settings alternated")
    ap.add_argument("--qps", type=int, default=2000)
    ap.add_argument("--burst", type=int, default=4000)
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="headroom-ahead-"))
    (workdir / "logs").mkdir()
    plane = ControlPlane(workdir=workdir, bin_dir=build_binaries(workdir / "logs" / "build.log"))
    rows = []
    try:
        plane.start()
        api = Api(plane)
        nodes = [f"node-{i:05d}" for i in range(args.nodes)]
        say(f"creating {len(nodes)} Ready nodes")
        create_nodes(api, nodes, say)
        for r in range(args.rounds):
            for setting in SETTINGS:
                rows.append(run(setting, plane, api, nodes, args) | {"round": r + 1})
        api.close()
    finally:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"\n{args.nodes} nodes, {args.pods} pods of new shapes one at a time\n\n"
        "| round | plans made ahead | passes in the cycle / ahead | filters "
        "| filter p50 ms | p99 ms | mean ms |\n|---:|---|---:|---:|---:|---:|---:|"
    )
    for w in rows:
        print(
            f"| {w['round']} | {w['setting']} | {w['cycle']:.0f} / {w['ahead']:.0f} | "
            f"{w['filters']} | {w['p50']:.2f} | {w['p99']:.2f} | {w['mean']:.2f} |"
        )


if __name__ == "__main__":
    main()
