"""filter+prioritize latency at 100 / 1,000 / 5,000 nodes, NodeNames and Nodes modes,
from a real HTTP client over loopback to ``headroom serve`` in its own process, next to
the floor (a trivial endpoint on the same server receiving the same bodies).

    .venv/bin/python bench/latency.py [--sizes 100,1000,5000] [--requests 1000] \
        [--modes NodeNames,Nodes] [--client httpx|lean|go] [--floor trivial|parse] \
        [--slowest N] [--shapes warm,churn,cold,shuffled] [--varied] \
        [--announce LEAD_MS] [--out docs/bench-latency.md]

The floor reads the same request body and answers with a prepared body of the same size
as the reply it is compared with (in Nodes mode the filter must send the passing Node
objects back, megabytes at 5,000 nodes: transport, not evaluation). With ``--client go``
the requests are made as kube-scheduler makes them (bench/goclient: the args encoded
with encoding/json, replies decoded into the typed results), and the floor answers with
the very reply bytes of the verb, so both are decoded alike.

"warm": every pod has the same shape and nothing changed in between (replicas in a row);
"churn": the same shape, but 1% of the nodes reported changed usage before each pod (the
realistic case: only those are re-evaluated); "cold": every pod a new memory ask (every
node evaluated afresh); "shuffled": the same shape, but the candidates in a new order for
every pod (kube-scheduler's parallel filter workers hand feasible nodes over in the order
they finish, so its lists are permutations, not repeats). filter gets the candidates,
prioritize the nodes filter passed (narrowing: usually a few), exactly as kube-scheduler
sends them: not at all when one node passed (the filter decided), which kube-scheduler
takes without scoring; the floor then gets the filter's request alone.

``--announce LEAD_MS``: each pod is first created in a real API server, LEAD_MS before
its filter, and the extender watches it (bench/announce.py): its plan is made ahead. The
floor's pair follows the create of a pod that asks no GPU and the same wait, so both
run after the same API server, etcd and watch work.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.announce import Announcer  # noqa: E402
from bench.goclient import GoClient  # noqa: E402
from bench.leanclient import LeanClient  # noqa: E402
from drivers.agent.loop import build_report  # noqa: E402
from drivers.gpu.simulated import SimulatedDriver  # noqa: E402
from extender.core.httpclient import make_client  # noqa: E402
from extender.simulate.server_thread import free_port  # noqa: E402
from extender.wire.clock import SystemClock  # noqa: E402

NODE = json.loads((ROOT / "tests/fixtures/node_g5_12xlarge.json").read_text())


def node_object(name: str) -> dict[str, Any]:
    """A Node as kube-scheduler encodes it from its informer cache: no kind/apiVersion."""
    n = copy.deepcopy(NODE)
    del n["kind"], n["apiVersion"]
    n["metadata"]["name"] = name
    n["metadata"]["labels"]["kubernetes.io/hostname"] = name
    return n


def pod(i: int, memory_mib: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"bench-{i}",
            "namespace": "bench",
            "uid": f"uid-bench-{i}",
            "annotations": {"headroom.dev/gpu-memory": f"{memory_mib}Mi"},
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


def start_server(
    tmp: str, sections: bool = False, keep_replies: bool = False, kubeconfig: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """bench/serve_with_floor.py on a free port; ``sections``: with its section timers;
    ``keep_replies``: its floor can answer with the last reply of a verb; ``kubeconfig``:
    watching that cluster."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench/serve_with_floor.py"),
            str(port),
            f"{tmp}/bench.db",
            *(["--sections"] if sections else []),
            *(["--keep-replies"] if keep_replies else []),
            *(["--kubeconfig", str(kubeconfig)] if kubeconfig else []),
        ],
        cwd=ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(url + "/healthz").status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


LABELS = {"node.kubernetes.io/instance-type": "g5.12xlarge"}
JSON = {"Content-Type": "application/json"}


def report_nodes(
    client: httpx.Client, names: list[str], varied: bool = False
) -> dict[str, SimulatedDriver]:
    """Every node reports 4 A10Gs; node i runs i % 4 processes of 2-16 GiB, so the fleet
    holds a few states, as a fleet of one instance type running a few workloads does.
    ``varied``: node i also runs a process of 256 + i MiB on its last GPU, so no two
    nodes are in the same state (nothing is shared between nodes' evaluations)."""
    clock = SystemClock()
    drivers = {}
    # agents come up in no particular order: the inventory's rows are not the order the
    # scheduler lists candidates in (as in a cluster)
    order = random.Random(11).sample(range(len(names)), len(names))
    for i in tqdm(order, desc="agent reports", leave=False, file=sys.stderr):
        name = names[i]
        d = drivers[name] = SimulatedDriver("4xA10G:24Gi", seed=i, node=name, clock=clock)
        for j, uuid in enumerate(d.gpu_uuids[: i % 4]):
            d.start_process(f"pod-{i}-{j}", uuid, 2048 * (1 + (i + j) % 8))
        if varied:
            d.start_process(f"own-{i}", d.gpu_uuids[-1], 256 + i)
        send_report(client, d, name, "spot" if i % 2 else "on-demand")
    return drivers


def send_report(client: httpx.Client, d: SimulatedDriver, name: str, capacity: str) -> None:
    labels = {**LABELS, "karpenter.sh/capacity-type": capacity}
    rep = build_report(d, name, d.attribute, SystemClock(), labels=labels)
    client.post("/v1/reports", content=msgspec.json.encode(rep)).raise_for_status()


def churn(
    client: httpx.Client,
    drivers: dict[str, SimulatedDriver],
    names: list[str],
    rng: random.Random,
    share: float = 0.01,
) -> None:
    """Between two pods, 1% of the nodes report changed usage (untimed)."""
    for name in rng.sample(names, max(1, int(len(names) * share))):
        d = drivers[name]
        d.end_pod("churn")
        d.start_process("churn", rng.choice(d.gpu_uuids), rng.randrange(256, 4096))
        send_report(client, d, name, "spot" if int(name[-5:]) % 2 else "on-demand")


def timed(
    client: httpx.Client, path: str, body: bytes, reply_bytes: int = 2
) -> tuple[float, httpx.Response]:
    headers = {**JSON, "X-Reply-Bytes": str(reply_bytes)}
    t = time.perf_counter()
    r = client.post(path, content=body, headers=headers)
    elapsed = time.perf_counter() - t
    r.raise_for_status()
    return elapsed, r


class HttpPairs:
    """The pair timed with a Python HTTP client (httpx, or bench/leanclient.py): bodies
    encoded before the clock starts, replies read after it stops; the floor gets the very
    same bodies and answers with as many bytes as each reply had."""

    def __init__(self, client: Any, floor_path: str = "/floor") -> None:
        self.client, self.nodes, self.floor_path = client, None, floor_path
        self._last: tuple[bytes, int, bytes, int] = (b"", 2, b"", 2)

    def load(self, nodes: dict[str, Any] | None) -> None:
        self.nodes = nodes

    def pair(self, pod_: dict[str, Any], names: list[str]) -> tuple[float, float]:
        first = body_for(pod_, names, self.nodes)
        t_filter, reply = timed(self.client, "/filter", first)
        names = passed(reply.json(), self.nodes)
        if len(names) == 1:  # kube-scheduler takes it: no prioritize
            self._last = (first, len(reply.content), b"", 0)
            return t_filter, 0.0
        second = body_for(pod_, names, self.nodes)
        t_prioritize, scores = timed(self.client, "/prioritize", second)
        self._last = (first, len(reply.content), second, len(scores.content))
        return t_filter, t_prioritize

    def floor(self) -> float:
        first, first_reply, second, second_reply = self._last
        spent = timed(self.client, self.floor_path, first, first_reply)[0]
        if second:
            spent += timed(self.client, self.floor_path, second, second_reply)[0]
        return spent


class GoPairs:
    """The pair timed by bench/goclient (kube-scheduler's client code path, its JSON
    encoding and decoding included), reports still posted by ``client``."""

    def __init__(self, go: GoClient) -> None:
        self.go, self.mode = go, "NodeNames"
        self._last: tuple[dict[str, Any], list[str]] = ({}, [])

    def load(self, nodes: dict[str, Any] | None) -> None:
        self.mode = "NodeNames" if nodes is None else "Nodes"
        if nodes is not None:
            self.go.nodes(list(nodes.values()))

    def pair(self, pod_: dict[str, Any], names: list[str]) -> tuple[float, float]:
        self._last = (pod_, names)
        return self.go.pair(pod_, names, self.mode)

    def floor(self) -> float:
        """The same pod and candidates, sent anew and handled alike (see goclient)."""
        return sum(self.go.pair(*self._last, self.mode, floor=True))


def measure(
    client: Any,
    pairs: HttpPairs | GoPairs,
    drivers: dict[str, SimulatedDriver],
    names: list[str],
    mode: str,
    shape: str,
    n: int,
    announce: Announcer | None = None,
) -> dict[str, Any]:
    """kube-scheduler's sequence per pod: filter with the candidates, then prioritize with
    the nodes filter passed; the floor gets the very same two requests. ``client`` posts
    the reports, ``pairs`` times the pairs.

    The client's own garbage collector runs between pods, not on its own schedule: the
    client holds 5,000 Node objects as dicts and 5,000 simulated agents, and a full
    collection of those (35-100 ms, several per run) landed inside timed requests, ours
    and the floor's alike. The client stands in for kube-scheduler; its pauses are not
    the server's latency. (Collected every pod all the same: httpx's requests and
    responses are cycles holding the megabyte bodies.)"""
    nodes = {x: node_object(x) for x in names} if mode == "Nodes" else None
    pairs.load(nodes)
    gc.collect()
    gc.freeze()  # the long-lived client objects: out of every collection below
    gc.disable()
    try:
        measured = _measure(client, pairs, drivers, names, mode, shape, n, announce)
        measured["body_kib"] = len(body_for(pod(0, 4096), names, nodes)) / 1024
        return measured
    finally:
        gc.enable()
        gc.unfreeze()


def _measure(
    client: Any,
    pairs: HttpPairs | GoPairs,
    drivers: dict[str, SimulatedDriver],
    names: list[str],
    mode: str,
    shape: str,
    n: int,
    announce: Announcer | None,
) -> dict[str, Any]:
    ours, floor, times = [], [], []
    rng = random.Random(7)
    # one untimed pair and floor first: a list's first request (its names read into the
    # decoder's index, their rows looked up) is the cold start's cost (bench/coldstart.py),
    # not a shape's. Warm and churn then start from a built plan, as in steady state; cold's
    # first pod asks what no timed pod asks (they ask 1,024 MiB and up).
    pairs.pair(pod(n, 512) if shape == "cold" else pod(0, 4096), names)
    pairs.floor()
    for i in tqdm(
        range(n), desc=f"{len(names)} nodes {mode} {shape}", leave=False, file=sys.stderr
    ):
        if shape == "churn":
            churn(client, drivers, names, rng)
        mem = 1024 + i if shape == "cold" else 4096
        order = rng.sample(names, len(names)) if shape == "shuffled" else names
        pod_ = pod(i, mem) if announce is None else announce(pod(i, mem))
        t_filter, t_prioritize = pairs.pair(pod_, order)
        ours.append(t_filter + t_prioritize)
        if shape == "churn":  # the floor under the same load: reports just processed
            churn(client, drivers, names, rng)
        if announce is not None:  # ... and after the same create and wait
            announce(pod(i, mem), gpu=False)
        floor.append(pairs.floor())
        times.append((t_filter, t_prioritize, floor[-1]))
        gc.collect()  # untimed, see measure()
    return {
        "p50": statistics.median(ours) * 1e3,
        "p99": _p99(ours) * 1e3,
        "floor_p50": statistics.median(floor) * 1e3,
        "floor_p99": _p99(floor) * 1e3,
        "pairs": times,  # per pod: (filter s, prioritize s, the floor's pair s)
    }


def passes(url: str) -> dict[str, float]:
    """The server's passes over every candidate so far: made in a filter or prioritize
    ("cycle"), or ahead of the filter for an announced pod ("ahead")."""
    text = httpx.get(url + "/metrics", timeout=30).text
    found = re.findall(r'^headroom_scheduling_passes_total\{when="(\w+)"\} (\S+)$', text, re.M)
    return {when: float(count) for when, count in found}


def body_for(pod_: dict[str, Any], names: list[str], nodes: dict[str, Any] | None) -> bytes:
    # Go's field order (Pod, Nodes, NodeNames), as kube-scheduler's encoding/json writes it
    args: dict[str, Any] = {"Pod": pod_, "Nodes": None, "NodeNames": None}
    if nodes is None:
        args["NodeNames"] = names
    else:
        args["Nodes"] = {"metadata": {}, "items": [nodes[x] for x in names]}
    return msgspec.json.encode(args)


def passed(reply: dict[str, Any], nodes: dict[str, Any] | None) -> list[str]:
    if nodes is None:
        return list(reply["NodeNames"])
    return [n["metadata"]["name"] for n in reply["Nodes"]["items"]]


def _p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000,5000")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--nodes-mode-requests", type=int, default=200)
    ap.add_argument("--modes", default="NodeNames,Nodes", help="which of NodeNames,Nodes")
    ap.add_argument("--out")
    ap.add_argument(
        "--client",
        choices=("httpx", "lean", "go"),
        default="httpx",
        help="the timed requests' client: httpx; a minimal socket client "
        "(bench/leanclient.py); or kube-scheduler's own client code path, "
        "JSON encoding and decoding included (bench/goclient, needs Go)",
    )
    ap.add_argument(
        "--floor",
        choices=("trivial", "parse"),
        default="trivial",
        help="trivial: the floor reads the body and answers; parse: it also parses the "
        "body as a bare FastAPI route does (issue 28's floor; not with --client go)",
    )
    ap.add_argument(
        "--slowest",
        type=int,
        default=0,
        help="also list each run's N slowest pairs, with the floor's pair "
        "of the same pod (do slow pairs come alone or in noisy spells?)",
    )
    ap.add_argument("--shapes", default="warm,churn,cold,shuffled", help="which pod shapes")
    ap.add_argument(
        "--varied",
        action="store_true",
        help="every node in a state of its own (by default the fleet holds a few states)",
    )
    ap.add_argument(
        "--announce",
        type=float,
        metavar="LEAD_MS",
        help="create each pod in a real API server (tests/e2e/build.sh's) LEAD_MS before "
        "its filter; the extender watches it, as it watches kube-scheduler's pods",
    )
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        announce = None
        if args.announce is not None:
            announce = stack.enter_context(Announcer(args.announce))
        kubeconfig = announce.kubeconfig if announce is not None else None
        proc, url = start_server(tmp, keep_replies=args.client == "go", kubeconfig=kubeconfig)
        opened: list[LeanClient | GoClient] = []  # closed at the end
        try:
            with make_client(url, timeout=120) as client:
                names = [f"node-{i:05d}" for i in range(max(sizes))]
                drivers = report_nodes(client, names, args.varied)
                client.post("/settle", timeout=150).raise_for_status()  # reports written
                reports: Any = client
                floor_path = "/floor-parse" if args.floor == "parse" else "/floor"
                pairs: HttpPairs | GoPairs = HttpPairs(client, floor_path)
                if args.client == "lean":  # reports on the same connection, as with httpx
                    reports = LeanClient(int(url.rsplit(":", 1)[1]))
                    pairs = HttpPairs(reports, floor_path)
                    opened.append(reports)
                elif args.client == "go":
                    pairs = GoPairs(GoClient(url))
                    opened.append(pairs.go)
                for size in sizes:
                    for mode in args.modes.split(","):
                        for shape in args.shapes.split(","):
                            n = args.requests if mode == "NodeNames" else args.nodes_mode_requests
                            before = passes(url)
                            run = (names[:size], mode, shape, n, announce)
                            measured = measure(reports, pairs, drivers, *run)
                            after = passes(url)
                            measured["passes"] = {k: after[k] - before[k] for k in after}
                            rows.append((size, mode, shape, n, measured))
        finally:
            for opened_client in opened:
                opened_client.close()
            proc.terminate()
            proc.wait()
    table = render(rows)
    if args.announce is not None:
        table = f"Pods announced {args.announce:g} ms ahead (bench/announce.py).\n\n{table}"
    print(table)
    if args.slowest:
        print(slowest(rows, args.slowest))
    if args.out:
        Path(args.out).write_text(table + "\n")


def slowest(rows: list[tuple[int, str, str, int, dict[str, Any]]], count: int) -> str:
    """Per run, its ``count`` slowest pairs in pod order: pod, filter, prioritize and the
    floor's pair of the same pod, ms."""
    out = [
        "| nodes | mode | shape | pod | filter ms | prioritize ms | floor pair ms |",
        "|---:|---|---|---:|---:|---:|---:|",
    ]
    for size, mode, shape, _, m in rows:
        pairs = m["pairs"]
        worst = sorted(sorted(range(len(pairs)), key=lambda i: -sum(pairs[i][:2]))[:count])
        for i in worst:
            f, p, fl = pairs[i]
            out.append(
                f"| {size} | {mode} | {shape} | {i} | {f * 1e3:.2f} | {p * 1e3:.2f} | "
                f"{fl * 1e3:.2f} |"
            )
    return "\n".join(out)


def render(rows: list[tuple[int, str, str, int, dict[str, Any]]]) -> str:
    out = [
        "| nodes | mode | shape | requests | body KiB | p50 ms | p99 ms | floor p50 ms "
        "| floor p99 ms | p99 / floor p99 | passes in the cycle / ahead |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, mode, shape, n, m in rows:
        out.append(
            f"| {size} | {mode} | {shape} | {n} | {m['body_kib']:.0f} | {m['p50']:.2f} | "
            f"{m['p99']:.2f} | {m['floor_p50']:.2f} | {m['floor_p99']:.2f} | "
            f"{m['p99'] / m['floor_p99']:.2f}x | "
            f"{m['passes'].get('cycle', 0):.0f} / {m['passes'].get('ahead', 0):.0f} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    main()
