"""The cluster side of bench/throughput.py: Ready nodes, a backlog of trace pods, a
kube-scheduler with its client QPS raised, and a watch that timestamps every bind.

Objects are written with a thin httpx client rather than the Python Kubernetes client:
creating 1,000-5,000 nodes (three calls each) and thousands of pods through the
generated models would spend the two shared cores on (de)serialisation that competes
with the very control plane being measured.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.quality.trace import TracePod, read_alibaba_pods
from tests.e2e.cluster import (
    FEATURE_GATES,
    REPO_ROOT,
    ControlPlane,
    Proc,
    free_port,
    https_get,
    ready_node_body,
    render_scheduler_config,
    wait_until,
)

OPENB_PODS = REPO_ROOT.parent / "shared" / "data" / "openb" / "openb_pod_list_default.csv"
GPUS_PER_NODE = 4
# The trace's 4- and 8-GPU pods (0.8% of its GPU pods) need an empty node. kube-scheduler's
# default scoring spreads, so in the "without" run none is left once the backlog is half
# placed: they stay pending and end the run at the stall limit, while "with" (which
# packs) binds them. Throughput is the question here, so they are left out.
MAX_GPUS_PER_POD = 2
A10G_MIB = 24 * 1024
# g5.12xlarge: 4 x A10G 24 GiB, 48 vCPU, 192 GiB (a type the shipped price book knows)
INSTANCE_TYPE = "g5.12xlarge"
NODE_CPU, NODE_MEMORY_GIB = 48, 192
MERGE = {"Content-Type": "application/merge-patch+json"}


class Api:
    """Bearer-token JSON calls against the e2e API server (thread-safe, pooled)."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.client = httpx.Client(
            base_url=plane.server,
            verify=plane.ssl_context(),
            headers={"Authorization": f"Bearer {plane.token}"},
            timeout=60,
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=32),
        )

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        content = None if body is None else json.dumps(body).encode()
        r = self.client.request(method, path, content=content, **kw)
        if r.status_code >= 400 and not (method == "POST" and r.status_code == 409):
            raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:300]}")
        return r.json() if r.content else None

    def close(self) -> None:
        self.client.close()


def node_body(name: str) -> dict[str, Any]:
    """A Ready Node without kubelet, sized as a g5.12xlarge so that every trace pod kept
    by ``trace_pods`` fits one node."""
    return ready_node_body(
        name,
        gpus=GPUS_PER_NODE,
        capacity_type="on-demand",
        instance_type=INSTANCE_TYPE,
        cpu=str(NODE_CPU),
        memory=f"{NODE_MEMORY_GIB}Gi",
    )


def create_nodes(api: Api, names: list[str], progress: Callable[[str], None]) -> None:
    """Create, untaint (TaintNodesByCondition adds not-ready on create; no node lifecycle
    controller runs to lift it) and mark Ready, in parallel."""

    def one(name: str) -> None:
        body = node_body(name)
        api.call("POST", "/api/v1/nodes", body)
        api.call("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": []}}, headers=MERGE)
        api.call("PATCH", f"/api/v1/nodes/{name}/status", {"status": body["status"]}, headers=MERGE)

    _parallel(one, names, "nodes", progress)


def _parallel(
    fn: Callable[[Any], None], items: list[Any], what: str, progress: Callable[[str], None]
) -> None:
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=16) as pool:
        for i, _ in enumerate(pool.map(fn, items), 1):
            if i % 500 == 0 or i == len(items):
                progress(f"  {what}: {i}/{len(items)} ({time.monotonic() - start:.0f} s)")


def trace_pods(count: int, seed: int, csv_path: Path = OPENB_PODS) -> list[TracePod]:
    """``count`` GPU pods drawn with replacement from the openb trace (bench/quality's
    mapping: a share of one GPU becomes ``gpu_milli`` of 24 GiB), keeping the shapes one
    node can hold (CPU and memory within a g5.12xlarge) and up to ``MAX_GPUS_PER_POD``: a
    pod that stays pending ends its run only at the stall limit."""
    pods, _ = read_alibaba_pods(csv_path, {"A10G": [A10G_MIB]})
    fit = [
        p
        for p in pods
        if p.demand.count <= MAX_GPUS_PER_POD
        and p.cpu_milli <= NODE_CPU * 1000
        and p.memory_mib <= NODE_MEMORY_GIB * 1024
    ]
    rng = random.Random(seed)
    return [rng.choice(fit) for _ in range(count)]


def pod_body(name: str, p: TracePod) -> dict[str, Any]:
    """``nvidia.com/gpu: count`` always (kube-scheduler counts devices in both runs);
    ``headroom.dev/gpu-memory`` only for a share of one GPU (else each GPU is whole)."""
    ann = {}
    if p.demand.memory_mib is not None:
        ann["headroom.dev/gpu-memory"] = f"{p.demand.memory_mib}Mi"
    return {
        "metadata": {"name": name, "annotations": ann, "labels": {"bench": "throughput"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {
                            "cpu": f"{max(p.cpu_milli, 1)}m",
                            "memory": f"{max(p.memory_mib, 1)}Mi",
                        },
                        "limits": {"nvidia.com/gpu": str(p.demand.count)},
                    },
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def shape_mix(pods: Iterable[TracePod]) -> dict[str, int]:
    """Counts per shape, for the report ("1x9830Mi", "1 whole", "2 whole", ...)."""
    mix: dict[str, int] = {}
    for p in pods:
        d = p.demand
        key = (
            f"1 x {math.ceil(d.memory_mib / 1024)} GiB share"
            if d.memory_mib
            else f"{d.count} whole"
        )
        mix[key] = mix.get(key, 0) + 1
    return dict(sorted(mix.items(), key=lambda kv: -kv[1]))


def make_namespace(api: Api, ns: str) -> None:
    """The namespace and its ``default`` ServiceAccount (no controller-manager makes it)."""
    api.call("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    api.call("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "default"}})


def create_pods(
    api: Api, ns: str, pods: list[TracePod], progress: Callable[[str], None]
) -> list[str]:
    names = [f"p{i:05d}" for i in range(len(pods))]
    items = list(zip(names, pods, strict=True))
    _parallel(
        lambda it: api.call("POST", f"/api/v1/namespaces/{ns}/pods", pod_body(*it)),
        items,
        "pods",
        progress,
    )
    return names


def delete_pods(api: Api, ns: str, timeout: float = 300) -> None:
    """Force-delete (grace 0: no kubelet will confirm) and wait until none is left."""
    api.call("DELETE", f"/api/v1/namespaces/{ns}/pods", params={"gracePeriodSeconds": "0"})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = api.call("GET", f"/api/v1/namespaces/{ns}/pods", params={"limit": "1"})
        if not left["items"]:
            return
        time.sleep(1)
    raise RuntimeError(f"pods of {ns} not gone after {timeout:.0f} s")


@dataclass
class BindWatch:
    """Watches a namespace's bound pods and keeps the monotonic time each got its node.

    A watch, not polling: a LIST of thousands of pods every few hundred ms would load the
    API server during the very window being timed. The field selector leaves only binds
    to send. A CPU-starved API server closes watchers it finds slow ("Forcing pods
    watcher close due to unresponsiveness"); the watch then lists the bound pods (those
    it missed get the list's time, counted in ``relists``) and watches again."""

    api: Api
    ns: str
    bound: dict[str, float] = field(default_factory=dict)
    relists: int = 0
    error: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        rv = self._list()
        threading.Thread(target=self._run, args=(rv,), daemon=True).start()

    def _list(self) -> str:
        params = {"fieldSelector": "spec.nodeName!="}
        listed = self.api.call("GET", f"/api/v1/namespaces/{self.ns}/pods", params=params)
        now = time.monotonic()
        for pod in listed["items"]:
            self.bound.setdefault(pod["metadata"]["name"], now)
        rv: str = listed["metadata"]["resourceVersion"]
        return rv

    def _run(self, rv: str) -> None:
        while not self._stop.is_set():
            params = {
                "watch": "true",
                "resourceVersion": rv,
                "fieldSelector": "spec.nodeName!=",
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "3600",
            }
            try:
                with self.api.client.stream(
                    "GET", f"/api/v1/namespaces/{self.ns}/pods", params=params, timeout=None
                ) as r:
                    for line in r.iter_lines():
                        if self._stop.is_set():
                            return
                        if not line:
                            continue
                        event = json.loads(line)
                        if event["type"] == "ERROR":  # e.g. 410 Gone: list again
                            break
                        meta = event["object"]["metadata"]
                        rv = meta["resourceVersion"]
                        if event["type"] == "ADDED":
                            self.bound.setdefault(meta["name"], time.monotonic())
            except Exception as e:  # closed by the server: list and watch again
                self.error = f"{type(e).__name__}: {e}"
            if self._stop.is_set():
                return
            self.relists += 1
            try:
                rv = self._list()
            except Exception as e:
                self.error = f"{type(e).__name__}: {e}"
                time.sleep(1)

    def stop(self) -> None:
        self._stop.set()


def start_scheduler(
    plane: ControlPlane,
    name: str,
    extender_url: str | None,
    qps: int,
    burst: int,
    cpus: set[int] | None = None,
) -> Proc:
    """kube-scheduler with the shipped configuration (as tests/e2e/cluster.py renders it)
    plus ``clientConnection.qps/burst``: at the default 50 QPS its own client, not the
    extender, would set the pace of both runs. ``cpus``: pinned there (with the plane)."""
    doc = yaml.safe_load(render_scheduler_config(plane.kubeconfig, extender_url))
    doc["clientConnection"].update({"qps": qps, "burst": burst})
    config = plane.workdir / f"{name}-config.yaml"
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    port = free_port()
    proc = Proc(
        name,
        [
            str(plane.bin_dir / "kube-scheduler"),
            f"--config={config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={plane.workdir / (name + '-certs')}",
            f"--authentication-kubeconfig={plane.kubeconfig}",
            f"--authorization-kubeconfig={plane.kubeconfig}",
            "--authentication-skip-lookup=true",
            f"--feature-gates={FEATURE_GATES}",
            "--v=1",  # no per-pod log line: the same in both runs, and less CPU
        ],
        plane.logs / f"{name}.log",
    )
    proc.start()
    if proc.popen is not None:
        pin(proc.popen.pid, cpus)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the scheduler's own self-signed serving cert

    def ready() -> bool:
        return https_get(f"https://127.0.0.1:{port}/readyz", ctx, plane.token)[0] == 200

    wait_until(f"{name} /readyz", ready, 120, [*plane.procs, proc])
    return proc


def cpu_seconds(pid: int) -> float:
    """User+system CPU of a process (all its threads) from /proc, 0 when gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse_cpus(spec: str) -> set[int]:
    """``taskset -c`` syntax: ``"1"``, ``"0,2"``, ``"0-3"``."""
    cpus: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    if max(cpus) >= (os.cpu_count() or 1):
        raise ValueError(f"CPUs {sorted(cpus)}: this machine has {os.cpu_count()}")
    return cpus


def pin(pid: int, cpus: set[int] | None) -> None:
    """Every thread the process has now onto ``cpus`` (``taskset -a -p``); threads it
    starts later inherit their creator's set. ``None`` leaves it where it is."""
    if cpus is None:
        return
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            os.sched_setaffinity(int(task.name), cpus)
