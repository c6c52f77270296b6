"""CPU per Binding POST, the one API call per pod on the bind path (issue 29).

Starts the e2e control plane (etcd and kube-apiserver, tests/e2e/cluster.py), creates
pods, and binds them one after another from one thread, three ways, alternated over
``--rounds``; the figure is the binding thread's CPU time per POST:

- ``KubeBinder`` as shipped: a kept-alive ``http.client`` connection
  (extender/kube/keepalive.py);
- ``KubeBinder`` through the Kubernetes client's urllib3 pool, the path it had before
  (and keeps for configurations keepalive.py does not reproduce);
- bare ``http.client`` on one connection, the same request with nothing around it: the
  floor.

    PYTHONPATH=. .venv/bin/python bench/bindpost.py [--pods 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.throughput_cluster import Api, create_nodes, make_namespace
from extender.kube.binder import KubeBinder
from extender.kube.client import api_client
from tests.e2e.cluster import ControlPlane, build_binaries

NS, NODE = "bindpost", "node-1"
GRANT = {"headroom.dev/gpu-uuids": "GPU-1", "headroom.dev/gpu-memory-mib": "6144"}
WARM = 10  # POSTs per batch before the clock starts (connections, caches)

Bind = Callable[[str, str], None]  # (pod name, uid)


def binding(name: str, uid: str) -> bytes:
    meta = {"name": name, "namespace": NS, "uid": uid, "annotations": GRANT}
    target = {"apiVersion": "v1", "kind": "Node", "name": NODE}
    doc = {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": target}
    return json.dumps(doc).encode()


def ways(plane: ControlPlane) -> dict[str, Bind]:
    shipped = KubeBinder(api_client(str(plane.kubeconfig)))
    pooled = KubeBinder(api_client(str(plane.kubeconfig)))
    pooled.lean = None  # the client's urllib3 pool
    host, port = plane.server.split("//")[1].split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=plane.ssl_context())
    headers = {
        "Authorization": f"Bearer {plane.token}",
        "Content-Type": "application/json",
        "Accept": "application/json",
    }

    def bare(name: str, uid: str) -> None:
        path = f"/api/v1/namespaces/{NS}/pods/{name}/binding"
        conn.request("POST", path, binding(name, uid), headers)
        reply = conn.getresponse()
        reply.read()
        if reply.status >= 300:
            raise RuntimeError(f"POST {path}: {reply.status}")

    return {
        "KubeBinder, kept-alive http.client (shipped)": lambda n, u: shipped.bind(
            NS, n, u, NODE, GRANT
        ),
        "KubeBinder, the client's urllib3 pool (before)": lambda n, u: pooled.bind(
            NS, n, u, NODE, GRANT
        ),
        "bare http.client (floor)": bare,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pods", type=int, default=300, help="POSTs per way per round")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="headroom-bindpost-"))
    (workdir / "logs").mkdir()
    plane = ControlPlane(workdir=workdir, bin_dir=build_binaries(workdir / "logs" / "build.log"))
    plane.start()
    try:
        api = Api(plane)
        create_nodes(api, [NODE], lambda s: None)
        make_namespace(api, NS)
        by_way = ways(plane)
        cpu: dict[str, list[float]] = {way: [] for way in by_way}
        bar = tqdm(total=args.rounds * len(by_way), desc="batches", unit="batch")
        for r in range(args.rounds):
            for k, (way, bind) in enumerate(by_way.items()):
                pods = [(f"r{r}w{k}p{i}", _create(api, f"r{r}w{k}p{i}")) for i in range(args.pods)]
                for name, uid in pods[:WARM]:
                    bind(name, uid)
                t0 = time.thread_time()
                for name, uid in pods[WARM:]:
                    bind(name, uid)
                cpu[way].append((time.thread_time() - t0) / (len(pods) - WARM) * 1e3)
                bar.update()
        bar.close()
        print("\n| way | CPU ms per POST, by round |\n|---|---|")
        for way, runs in cpu.items():
            print(f"| {way} | {', '.join(f'{x:.2f}' for x in runs)} |")
        api.close()
    finally:
        plane.stop()
    return 0


def _create(api: Api, name: str) -> str:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }
    uid: str = api.call("POST", f"/api/v1/namespaces/{NS}/pods", body)["metadata"]["uid"]
    return uid


if __name__ == "__main__":
    sys.exit(main())
