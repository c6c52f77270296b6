"""Sustained load on ``headroom serve``: agent reports for every node plus a scheduling loop.

    .venv/bin/python bench/load.py [--nodes 5000] [--interval 1] [--duration 600] \
        [--schedulers 2] [--names 500] [--live-pods 2000] \
        [--json docs/bench-load.json] [--plot docs/bench-load.png]

``headroom serve`` runs in its own process (SQLite ledger, bearer-token auth, as
deployed). Two load processes talk to it over loopback with real HTTP clients (the
project's ``make_client``, one keep-alive connection per worker thread):

* reports: every node reports once per ``--interval`` (open loop: each node has a due
  time; a worker that falls behind sends immediately, so when the extender cannot keep
  up the achieved rate is what it sustains). 4 x A10G per node, used memory moving.
* scheduling: ``--schedulers`` loops of filter -> prioritize -> bind on ``--names``
  random NodeNames (kube-scheduler's adaptive percentage sends ~10% of 5,000 nodes),
  1-GPU pods with a memory ask; the oldest pods are released once ``--live-pods`` are
  bound, so the cluster never fills.

Every 10 s the extender's VmRSS (``/proc/<pid>/status``) and CPU time are sampled. Any
non-200 answer, transport error, or protocol ``Error`` counts as an error.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from extender.core.httpclient import make_client  # noqa: E402
from extender.simulate.server_thread import free_port  # noqa: E402

TOKEN = "bench-load-token"
GPU_MIB = 24 * 1024
ASKS_MIB = (4096, 8192, 12288, 16384)
JSON = {"Content-Type": "application/json"}


# --- bodies --------------------------------------------------------------------------


def report_body(node: int, variant: int) -> bytes:
    """One node's report: 4 x A10G with two pod processes each; ``variant`` moves the used
    memory so the extender sees changed GPUs (and rebuilds views) on most reports."""
    rng = random.Random(node * 7 + variant)
    gpus = []
    for g in range(4):
        used = rng.randrange(256, 6144)
        gpus.append(
            {
                "uuid": f"GPU-{node:05d}-{g}",
                "index": g,
                "model": "NVIDIA A10G",
                "memory_total_mib": GPU_MIB,
                "memory_used_mib": used,
                "utilization_gpu": 30.0,
                "processes": [
                    {
                        "pid": 1000 + g,
                        "used_mib": used // 2,
                        "pod_uid": f"pod-{node}-{g}",
                        "container_id": "c",
                    }
                ],
            }
        )
    return msgspec.json.encode(
        {
            "node": f"node-{node:05d}",
            "sampled_at": time.time(),
            "gpus": gpus,
            "driver": "simulated",
            "agent_version": "bench",
            "labels": {
                "node.kubernetes.io/instance-type": "g5.12xlarge",
                "karpenter.sh/capacity-type": "spot" if node % 3 else "on-demand",
            },
        }
    )


def pod_body(uid: str, ask_mib: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": uid,
            "namespace": "bench",
            "uid": uid,
            "annotations": {"headroom.dev/gpu-memory": f"{ask_mib}Mi"},
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


# --- stats shipped from the load processes to the main one ------------------------------


class Tally:
    """Per-process counters and latency samples, flushed to the main process each second."""

    def __init__(self, kind: str, out: Any) -> None:
        self.kind, self.out = kind, out
        self.lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.ok = 0
        self.errors = 0
        self.lat: dict[str, list[float]] = collections.defaultdict(list)
        self.messages: list[str] = []

    def add(self, ok: bool, lat: dict[str, float], message: str = "") -> None:
        with self.lock:
            if ok:
                self.ok += 1
            else:
                self.errors += 1
                if message and len(self.messages) < 5:
                    self.messages.append(message[:300])
            for k, v in lat.items():
                self.lat[k].append(v)

    def flush_forever(self, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            self.flush()
        self.flush()

    def flush(self) -> None:
        with self.lock:
            item = {
                "kind": self.kind,
                "t": time.time(),
                "ok": self.ok,
                "errors": self.errors,
                "lat": dict(self.lat),
                "messages": self.messages,
            }
            self._reset()
        self.out.put(item)


def run_reports(
    url: str, nodes: int, interval: float, workers: int, start: float, end: float, out: Any
) -> None:
    """Each worker owns nodes i ≡ w (mod workers), walking them in due-time order."""
    tally = Tally("reports", out)
    stop = threading.Event()
    bodies = [[report_body(n, v) for v in range(4)] for n in range(nodes)]

    def worker(w: int) -> None:
        mine = list(range(w, nodes, workers))
        with make_client(url, TOKEN) as client:
            r = 0
            while True:
                for n in mine:
                    due = start + r * interval + (n / nodes) * interval
                    now = time.time()
                    if now >= end:
                        return
                    if due > now:
                        time.sleep(min(due - now, end - now))
                    t0 = time.perf_counter()
                    try:
                        resp = client.post("/v1/reports", content=bodies[n][r % 4], headers=JSON)
                        ok = resp.status_code == 200
                        msg = "" if ok else f"report {resp.status_code}: {resp.text[:200]}"
                    except Exception as e:  # transport errors are errors, counted
                        ok, msg = False, f"report transport: {type(e).__name__}: {e}"
                    tally.add(ok, {"report": time.perf_counter() - t0}, msg)
                r += 1

    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(workers)]
    flusher = threading.Thread(target=tally.flush_forever, args=(stop,), daemon=True)
    flusher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    flusher.join()


def run_scheduling(
    url: str, nodes: int, names: int, live_pods: int, loops: int, end: float, out: Any
) -> None:
    tally = Tally("scheduling", out)
    stop = threading.Event()
    all_names = [f"node-{n:05d}" for n in range(nodes)]

    def loop(w: int) -> None:
        rng = random.Random(w)
        bound: collections.deque[str] = collections.deque()
        i = 0
        with make_client(url, TOKEN) as client:
            while time.time() < end:
                i += 1
                uid = f"bench-{w}-{i}"
                ok, msg, lat = cycle(client, rng, uid, rng.sample(all_names, names))
                if ok:
                    bound.append(uid)
                while len(bound) > live_pods // loops:
                    old = bound.popleft()
                    t0 = time.perf_counter()
                    try:
                        r = client.post(f"/v1/pods/{old}/release")
                        if r.status_code != 200:
                            ok, msg = False, f"release {r.status_code}: {r.text[:200]}"
                    except Exception as e:
                        ok, msg = False, f"release transport: {type(e).__name__}: {e}"
                    lat["release"] = time.perf_counter() - t0
                tally.add(ok, lat, msg)

    threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in range(loops)]
    flusher = threading.Thread(target=tally.flush_forever, args=(stop,), daemon=True)
    flusher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    flusher.join()


def cycle(
    client: Any, rng: random.Random, uid: str, names: list[str]
) -> tuple[bool, str, dict[str, float]]:
    """One pod through filter -> prioritize -> bind, as kube-scheduler drives it."""
    pod = pod_body(uid, rng.choice(ASKS_MIB))
    lat: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        r = client.post(
            "/filter", content=msgspec.json.encode({"Pod": pod, "NodeNames": names}), headers=JSON
        )
        lat["filter"] = time.perf_counter() - t0
        if r.status_code != 200 or r.json().get("Error"):
            return False, f"filter {r.status_code}: {r.text[:200]}", lat
        passing = r.json().get("NodeNames") or []
        if not passing:
            return False, f"filter: no node passes: {r.text[:200]}", lat
        t1 = time.perf_counter()
        r = client.post(
            "/prioritize",
            content=msgspec.json.encode({"Pod": pod, "NodeNames": passing}),
            headers=JSON,
        )
        lat["prioritize"] = time.perf_counter() - t1
        if r.status_code != 200:
            return False, f"prioritize {r.status_code}: {r.text[:200]}", lat
        best = max(r.json(), key=lambda h: h["Score"])["Host"]
        t2 = time.perf_counter()
        r = client.post(
            "/bind",
            content=msgspec.json.encode(
                {"PodName": uid, "PodNamespace": "bench", "PodUID": uid, "Node": best}
            ),
            headers=JSON,
        )
        lat["bind"] = time.perf_counter() - t2
        lat["cycle"] = time.perf_counter() - t0
        if r.status_code != 200 or r.json().get("Error"):
            return False, f"bind {r.status_code}: {r.text[:200]}", lat
        return True, "", lat
    except Exception as e:
        return False, f"transport: {type(e).__name__}: {e}", lat


# --- the extender process ------------------------------------------------------------


def start_server(tmp: Path, stale_after: float) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    (tmp / "token").write_text(TOKEN)
    cmd = [
        sys.executable,
        "-m",
        "extender.cli",
        "serve",
        "--port",
        str(port),
        "--db",
        str(tmp / "ledger.db"),
        "--agent-token-file",
        str(tmp / "token"),
        "--stale-after",
        str(stale_after),
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "serve.log", "wb"),  # noqa: SIM115 - the server outlives this scope
    )
    url = f"http://127.0.0.1:{port}"
    with make_client(url) as c:
        for _ in range(300):
            try:
                if c.get("/healthz").status_code == 200:
                    return proc, url
            except Exception:
                time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"headroom serve did not start: {(tmp / 'serve.log').read_text()}")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def warm_up(url: str, nodes: int) -> None:
    """Every node reports once before the clock starts, so the first filters see them."""

    def part(k: int) -> None:
        with make_client(url, TOKEN) as c:
            for n in range(k, nodes, 8):
                c.post("/v1/reports", content=report_body(n, 0), headers=JSON).raise_for_status()

    threads = [threading.Thread(target=part, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--interval", type=float, default=1.0, help="report interval per node (s)")
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--report-workers", type=int, default=48)
    ap.add_argument("--schedulers", type=int, default=2, help="concurrent scheduling loops")
    ap.add_argument("--names", type=int, default=500, help="NodeNames per filter")
    ap.add_argument("--live-pods", type=int, default=2000)
    ap.add_argument("--stale-after", type=float, default=30.0)
    ap.add_argument("--json", help="write the summary and time series here")
    ap.add_argument("--plot", help="write a PNG: latency and RSS over time")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="headroom-load-"))
    proc, url = start_server(tmp, args.stale_after)
    try:
        t_warm = time.time()
        warm_up(url, args.nodes)
        print(f"warm-up: {args.nodes} reports in {time.time() - t_warm:.1f}s", file=sys.stderr)
        return run(args, proc, url)
    finally:
        proc.terminate()
        proc.wait(10)


def run(args: argparse.Namespace, proc: subprocess.Popen[bytes], url: str) -> int:
    # spawn, not fork: forking this threaded process could copy a held lock into a child
    # (seen: the scheduling child deadlocked before its first request)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    start = time.time() + 5.0  # spawned children import the project first
    end = start + args.duration
    children = [
        ctx.Process(
            target=run_reports,
            args=(url, args.nodes, args.interval, args.report_workers, start, end, queue),
        ),
        ctx.Process(
            target=run_scheduling,
            args=(url, args.nodes, args.names, args.live_pods, args.schedulers, end, queue),
        ),
    ]
    for c in children:
        c.start()
    rss0, cpu0 = rss_mib(proc.pid), cpu_s(proc.pid)
    samples = [{"t": 0.0, "rss_mib": rss0, "cpu_s": 0.0}]
    per_second: list[dict[str, Any]] = []
    errors: list[str] = []
    totals = {"reports": [0, 0], "scheduling": [0, 0]}
    lat_all: dict[str, list[float]] = collections.defaultdict(list)
    next_sample = start + 10
    bar = tqdm(total=int(args.duration), unit="s", desc="load", file=sys.stderr)
    shown = 0
    while any(c.is_alive() for c in children) or not queue.empty():
        try:
            item = queue.get(timeout=0.5)
        except Exception:
            item = None
        now = time.time()
        if item is not None:
            item["rel"] = item["t"] - start
            per_second.append(
                {k: item[k] for k in ("kind", "rel", "ok", "errors")} | {"lat": item["lat"]}
            )  # rel: end of that 1-s flush
            totals[item["kind"]][0] += item["ok"]
            totals[item["kind"]][1] += item["errors"]
            errors.extend(item["messages"][: max(0, 20 - len(errors))])
            for k, v in item["lat"].items():
                lat_all[k].extend(v)
        if now >= next_sample and proc.poll() is None:
            samples.append(
                {"t": now - start, "rss_mib": rss_mib(proc.pid), "cpu_s": cpu_s(proc.pid) - cpu0}
            )
            next_sample += 10
        elapsed = int(min(max(now - start, 0), args.duration))
        if elapsed > shown:
            bar.update(elapsed - shown)
            shown = elapsed
            bar.set_postfix(
                reports=totals["reports"][0],
                pods=totals["scheduling"][0],
                errors=totals["reports"][1] + totals["scheduling"][1],
                rss=f"{samples[-1]['rss_mib']:.0f}MiB",
            )
    bar.close()
    for c in children:
        c.join()
    if proc.poll() is None:
        samples.append(
            {
                "t": time.time() - start,
                "rss_mib": rss_mib(proc.pid),
                "cpu_s": cpu_s(proc.pid) - cpu0,
            }
        )
    summary = summarize(args, totals, lat_all, samples, errors)
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"summary": summary, "rss": samples, "windows": windows(per_second, args.duration)},
                indent=1,
            )
        )
    if args.plot:
        plot(args.plot, windows(per_second, args.duration), samples, summary)
    return 0 if summary["errors"] == 0 else 1


def summarize(
    args: argparse.Namespace,
    totals: dict[str, list[int]],
    lat: dict[str, list[float]],
    samples: list[dict[str, float]],
    errors: list[str],
) -> dict[str, Any]:
    d = args.duration
    reports_ok, pods_ok = totals["reports"][0], totals["scheduling"][0]
    report_rate = reports_ok / d
    # growth after the first minute (the first minute fills caches and the page cache)
    later = [s for s in samples if s["t"] >= 60] or samples
    return {
        "command": " ".join([".venv/bin/python", "bench/load.py", *sys.argv[1:]]),
        "nodes": args.nodes,
        "target_interval_s": args.interval,
        "duration_s": d,
        "target_reports_per_s": args.nodes / args.interval,
        "reports_accepted": reports_ok,
        "reports_per_s": round(report_rate, 1),
        "interval_needed_for_nodes_s": round(args.nodes / report_rate, 2) if report_rate else None,
        "pods_scheduled": pods_ok,
        "scheduling_cycles_per_s": round(pods_ok / d, 2),
        "latency_ms": {
            k: {
                "p50": round(pct(v, 0.5) * 1e3, 2),
                "p99": round(pct(v, 0.99) * 1e3, 2),
                "mean": round(statistics.fmean(v) * 1e3, 2),
                "n": len(v),
            }
            for k, v in sorted(lat.items())
            if v
        },
        "errors": totals["reports"][1] + totals["scheduling"][1],
        "error_samples": errors,
        "rss_mib": {
            "start": round(samples[0]["rss_mib"], 1),
            "at_60s": round(later[0]["rss_mib"], 1),
            "end": round(samples[-1]["rss_mib"], 1),
            "max": round(max(s["rss_mib"] for s in samples), 1),
        },
        "extender_cpu_percent": round(100 * samples[-1]["cpu_s"] / max(samples[-1]["t"], 1), 1),
    }


def windows(
    per_second: list[dict[str, Any]], duration: float, width: float = 10.0
) -> list[dict[str, Any]]:
    """10-second windows inside the run: reports/s, cycles/s, cycle p50/p99 (ms)."""
    buckets: dict[int, dict[str, Any]] = {}
    for item in per_second:
        if not 0 <= item["rel"] < duration:  # the last flush after the end is partial
            continue
        b = buckets.setdefault(int(item["rel"] // width), {"reports": 0, "pods": 0, "cycle": []})
        if item["kind"] == "reports":
            b["reports"] += item["ok"]
        else:
            b["pods"] += item["ok"]
            b["cycle"].extend(item["lat"].get("cycle", []))
    out = []
    for k in sorted(buckets):
        b = buckets[k]
        out.append(
            {
                "t": (k + 1) * width,
                "reports_per_s": b["reports"] / width,
                "cycles_per_s": b["pods"] / width,
                "cycle_p50_ms": pct(b["cycle"], 0.5) * 1e3,
                "cycle_p99_ms": pct(b["cycle"], 0.99) * 1e3,
            }
        )
    return out


def plot(
    path: str, wins: list[dict[str, Any]], samples: list[dict[str, float]], summary: dict[str, Any]
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    t = [w["t"] for w in wins]
    ax1.plot(t, [w["cycle_p50_ms"] for w in wins], label="p50")
    ax1.plot(t, [w["cycle_p99_ms"] for w in wins], label="p99")
    ax1.set_ylabel("filter+prioritize+bind (ms)")
    ax1.legend()
    ax1.set_title(
        f"headroom serve under load: {summary['nodes']} nodes, "
        f"target report interval {summary['target_interval_s']} s"
    )
    ax2.plot(t, [w["reports_per_s"] for w in wins], label="reports/s accepted")
    ax2.plot(t, [w["cycles_per_s"] * 100 for w in wins], label="pods scheduled/s x100")
    ax2.set_ylabel("rate")
    ax2.legend()
    ax3.plot([s["t"] for s in samples], [s["rss_mib"] for s in samples], marker=".")
    ax3.set_ylabel("extender VmRSS (MiB)")
    ax3.set_xlabel("seconds into the run")
    ax3.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
