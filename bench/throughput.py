"""Scheduling throughput through the real kube-scheduler, with and without headroom.

Issue 29 asks whether the extender is the bottleneck of a busy cluster. A latency
benchmark (bench/latency.py) cannot say: kube-scheduler filters and scores one pod at a
time but binds many at once, so what limits pods/s is whichever stage queues. This
benchmark measures it end to end, in one run, on the e2e control plane (etcd,
kube-apiserver and kube-scheduler built from Go modules, tests/e2e/cluster.py):

1. N Ready nodes (no kubelet), each a g5.12xlarge with ``nvidia.com/gpu: 4``;
2. a backlog of GPU pods drawn from the openb trace, created while no scheduler runs;
3. run "without": kube-scheduler with the shipped configuration minus its extender;
   timed from the first bind to the last (a watch on the pods); the pods are deleted;
4. run "with": ``headroom serve`` (filter, prioritize, bind) reported by one simulated
   agent per node, the same backlog, the shipped configuration;

both with the scheduler's ``clientConnection.qps/burst`` raised. It prints pods/s for
each run and their ratio, the CPU each process spent per pod, and where the extender's
time per pod went (bench/throughput_spans.py), and can plot pods bound over time.

    python -m bench.throughput --nodes 1000 --pods 2000 --plot docs/bench-throughput.png
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.quality.trace import TracePod
from bench.throughput_cluster import (
    Api,
    BindWatch,
    cpu_seconds,
    create_nodes,
    create_pods,
    delete_pods,
    make_namespace,
    parse_cpus,
    pin,
    shape_mix,
    start_scheduler,
    trace_pods,
)
from bench.throughput_extender import Extender
from bench.throughput_pprof import Profiles
from tests.e2e.cluster import ControlPlane, Proc, build_binaries
from tests.ledger.pg import PgServer, binaries_missing


def say(message: str) -> None:
    print(message, flush=True)


@dataclass
class RunResult:
    """One timed backlog: ``rate`` = pods bound / (last bind - first bind)."""

    name: str
    pods: int
    bound: int = 0
    seconds: float = 0.0
    rate: float = 0.0
    timeline: list[float] = field(default_factory=list)  # bind offsets from the first (s)
    cpu_s: dict[str, float] = field(default_factory=dict)  # per process, first..last bind
    load: list[float] = field(default_factory=list)  # 1-min load average at start, at end
    idle_ms_per_s: dict[str, float] = field(default_factory=dict)  # per process, backlog done
    note: str = ""


def _cpu(procs: dict[str, int]) -> dict[str, float]:
    out = {name: cpu_seconds(pid) for name, pid in procs.items()}
    t = os.times()
    out["bench (watch, this process)"] = t.user + t.system
    return out


def timed_run(
    name: str,
    api: Api,
    plane: ControlPlane,
    pods: list[TracePod],
    extender: Extender | None,
    args: argparse.Namespace,
    profiles: Profiles | None = None,
) -> tuple[RunResult, dict[str, Any]]:
    """Create the backlog, start a scheduler, time the binds, stop, clean up; with the
    extender's spans, read before the pods are deleted (their releases are not the run)."""
    ns = f"bench-{name}"
    say(f"[{name}] backlog of {len(pods)} pods in {ns}")
    make_namespace(api, ns)
    create_pods(api, ns, pods, say)
    watch = BindWatch(api, ns)
    watch.start()
    if extender is not None:
        extender.reset_spans()  # the reports and pod events before now are not the run
    url = extender.url if extender is not None else None
    say(f"[{name}] starting kube-scheduler (extender: {url or 'none'})")
    started = time.monotonic()
    cpus = parse_cpus(args.pin_plane) if args.pin_plane else None
    load = os.getloadavg()[0]
    sched = start_scheduler(plane, f"kube-scheduler-{name}", url, args.qps, args.burst, cpus)
    if profiles is not None:
        profiles.start(name, sched)
    try:
        result = _wait(name, watch, plane, sched, extender, len(pods), started, args)
    finally:
        if profiles is not None:
            profiles.wait()  # the scheduler must outlive its profile
        sched.stop()
        watch.stop()
    result.load = [round(load, 2), round(os.getloadavg()[0], 2)]
    spans = extender.read_spans() if extender is not None else {}
    say(f"[{name}] deleting the pods")
    delete_pods(api, ns)
    return result, spans


def _wait(
    name: str,
    watch: BindWatch,
    plane: ControlPlane,
    sched: Proc,
    extender: Extender | None,
    pods: int,
    started: float,
    args: argparse.Namespace,
) -> RunResult:
    """Until every pod is bound or none was for ``--stall`` s; CPU sampled as it goes."""
    procs = {p.name: p.popen.pid for p in plane.procs if p.popen is not None}
    if sched.popen is not None:
        procs["kube-scheduler"] = sched.popen.pid
    if extender is not None and extender.proc is not None:
        procs["headroom serve"] = extender.proc.pid
    result = RunResult(name, pods)
    samples: list[tuple[float, dict[str, float]]] = []
    last_say, last_count = 0.0, 0
    while True:
        time.sleep(0.25)
        now = time.monotonic()
        samples.append((now, _cpu(procs)))
        times = sorted(watch.bound.values())
        if len(times) >= pods:
            break
        idle_since = times[-1] if times else started
        if now - idle_since > (args.stall if times else args.stall + 120):
            result.note = f"stopped: no bind for {now - idle_since:.0f} s"
            break
        if now - last_say >= 5:
            say(f"[{name}] {len(times)}/{pods} bound, {(len(times) - last_count) / 5:.0f}/s")
            last_say, last_count = now, len(times)
    if watch.relists:
        result.note += f" the watch was closed and re-listed {watch.relists} times."
    result.idle_ms_per_s = _idle(procs, args.idle)
    times = sorted(watch.bound.values())
    result.bound = len(times)
    if len(times) >= 2:
        first, last = times[0], times[-1]
        result.seconds = last - first
        result.rate = result.bound / result.seconds
        result.timeline = [round(t - first, 4) for t in times]
        before = [c for t, c in samples if t <= first] or [samples[0][1]]
        after = next((c for t, c in samples if t >= last), samples[-1][1])
        result.cpu_s = {k: round(after[k] - before[-1][k], 3) for k in after}
    say(f"[{name}] {result.bound} bound in {result.seconds:.1f} s: {result.rate:.1f} pods/s")
    return result


def _idle(procs: dict[str, int], seconds: float) -> dict[str, float]:
    """CPU each process spends per second with nothing to schedule (the backlog bound, the
    scheduler still running; after 1 s for the last binds to settle): leases, watches'
    bookmarks, resyncs, garbage collection. A run that takes longer pays it for longer,
    so it is part of a slower run's CPU per pod without being work per pod."""
    if seconds <= 0:
        return {}
    time.sleep(1)
    t0, before = time.monotonic(), _cpu(procs)
    time.sleep(seconds)
    after, dt = _cpu(procs), time.monotonic() - t0
    return {k: round((after[k] - before[k]) * 1e3 / dt, 2) for k in after}


def breakdown(
    spans: dict[str, list[float]], pods: int
) -> list[tuple[str, int, float, float, float, float | None]]:
    """(span, calls, p50 ms, p99 ms, ms per bound pod, CPU ms per bound pod), in the
    order of the bind path; the CPU is the span's thread's (``NAME [CPU]``), None where
    the span has none."""
    order = [
        "http /filter", "http /filter: body read", "service.filter",
        "plans: a list evaluated afresh",
        "http /filter: loop thread on a CPU", "http /filter: loop thread waiting for a CPU",
        "http /filter: loop thread off CPU (GIL, select)",
        "http /prioritize", "http /prioritize: body read", "service.prioritize",
        "http /prioritize: loop thread on a CPU",
        "http /prioritize: loop thread waiting for a CPU",
        "http /prioritize: loop thread off CPU (GIL, select)",
        "http /bind", "http /bind: body read", "bind pool: wait for a thread",
        "bind pool: job (decode, service.bind, gc)",
        "service.bind", "bind: in-flight turn", "bind: decide + reserve (inventory lock)",
        "ledger record_decision (bind thread waits)",
        "ledger record_decision (in the ledger thread)",
        "kube: Binding POST (with the grant)",
        "kube: Binding POST (with the grant): HTTP round trip (urllib3)",
        "ledger mark_bound (bind thread waits)", "ledger mark_bound (in the ledger thread)",
        "sqlite BEGIN IMMEDIATE (write lock wait)", "sqlite statements (rows, hash chain)",
        "sqlite COMMIT (fsync)", "bind: collect_due (gc)",
        "service.refresh (after each bind, event loop)",
    ]  # fmt: skip
    timed = {n: v for n, v in spans.items() if not n.endswith(" [CPU]")}
    names = [n for n in order if n in timed] + sorted(n for n in timed if n not in order)
    rows = []
    per_pod = 1e3 / max(pods, 1)
    for n in names:
        v = sorted(timed[n])
        if not v:
            continue
        p99 = v[min(len(v) - 1, int(0.99 * len(v)))]
        cpu = spans.get(f"{n} [CPU]")
        cpu_per_pod = None if cpu is None else sum(cpu) * per_pod
        p50 = statistics.median(v) * 1e3
        rows.append((n, len(v), p50, p99 * 1e3, sum(v) * per_pod, cpu_per_pod))
    return rows


def print_report(results: list[RunResult], spans: dict[str, Any], args: argparse.Namespace) -> None:
    say(f"\n## {args.nodes} nodes x 4 GPUs, {args.pods} pods, qps/burst {args.qps}/{args.burst}\n")
    if args.pin_plane or args.pin_extender:
        say(
            f"Pinned: etcd, kube-apiserver, kube-scheduler and the bench on CPUs "
            f"{args.pin_plane or 'any'}; headroom serve on CPUs {args.pin_extender or 'any'}.\n"
        )
    say("| run | pods bound | seconds | pods/s | load average (start, end) |")
    say("|---|---|---|---|---|")
    for r in results:
        load = ", ".join(f"{x:.1f}" for x in r.load)
        say(f"| {r.name} | {r.bound}/{r.pods} | {r.seconds:.1f} | {r.rate:.1f} | {load} |")
    rate = {r.name: r.rate for r in results}
    if rate.get("without") and "with" in rate:
        say(f"| ratio with ÷ without | | | **{rate['with'] / rate['without']:.2f}** | |")
    for r in results:
        if r.note:
            say(f"\n{r.name}: {r.note.strip()}")
    say(
        "\nCPU per bound pod (ms), first bind to last bind; idle: CPU per second (ms/s) once"
        " the backlog is bound, and what it makes of a pod's CPU at the run's rate:\n"
    )
    procs = sorted({k for r in results for k in r.cpu_s})
    heads = [f"{r.name}: per pod · idle ms/s · idle per pod" for r in results]
    say("| process | " + " | ".join(heads) + " |")
    say("|---|" + "---|" * len(results))
    for p in procs:
        cells = []
        for r in results:
            idle = r.idle_ms_per_s.get(p, 0.0)
            per_pod = r.cpu_s.get(p, 0) * 1e3 / max(r.bound, 1)
            cells.append(f"{per_pod:.2f} · {idle:.1f} · {idle / r.rate if r.rate else 0:.2f}")
        say(f"| {p} | " + " | ".join(cells) + " |")
    with_run = next((r for r in results if r.name == "with"), None)
    if spans.get("spans") and with_run is not None:
        say(
            f"\nExtender spans, run 'with' ({with_run.bound} pods bound;"
            " ms per pod = sum ÷ pods; CPU: the span's own thread's):\n"
        )
        say("| span | calls | p50 ms | p99 ms | ms per pod | CPU ms per pod |")
        say("|---|---|---|---|---|---|")
        for name, calls, p50, p99, per, cpu in breakdown(spans["spans"], with_run.bound):
            on_cpu = "" if cpu is None else f"{cpu:.2f}"
            say(f"| {name} | {calls} | {p50:.2f} | {p99:.2f} | {per:.2f} | {on_cpu} |")
        for k, v in spans.get("counts", {}).items():
            say(f"- {k}: {v}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.throughput",
        description="pods/s bound by the real kube-scheduler with and without headroom "
        "(issue 29), and where the extender's time per pod goes",
    )
    p.add_argument("--nodes", type=int, default=1000, help="Ready nodes, 4 GPUs each")
    p.add_argument("--pods", type=int, default=2000, help="backlog of GPU pods per run")
    p.add_argument("--seed", type=int, default=1, help="draw of pod shapes from the trace")
    p.add_argument("--qps", type=int, default=2000, help="kube-scheduler clientConnection.qps")
    p.add_argument("--burst", type=int, default=4000, help="kube-scheduler clientConnection.burst")
    p.add_argument("--runs", choices=["both", "without", "with"], default="both")
    p.add_argument("--stall", type=float, default=30, help="end a run after this long with no bind")
    p.add_argument(
        "--idle", type=float, default=5, help="seconds of idle CPU measured after each run"
    )
    p.add_argument("--no-spans", action="store_true", help="plain `extender.cli serve`, untimed")
    p.add_argument(
        "--pin-plane",
        metavar="CPUS",
        help="etcd, kube-apiserver, kube-scheduler and the bench on these CPUs (taskset -c "
        "syntax), in both runs",
    )
    p.add_argument(
        "--pin-extender",
        metavar="CPUS",
        help="headroom serve on these CPUs: its own, as in its own pod",
    )
    p.add_argument(
        "--postgres",
        action="store_true",
        help="the ledger in a real PostgreSQL server started for the run (tests/ledger/pg.py; "
        "pinned with the extender), instead of a SQLite file",
    )
    p.add_argument(
        "--pprof",
        type=Path,
        metavar="DIR",
        help="write 10 s Go CPU profiles of kube-apiserver and kube-scheduler in each run "
        "here (from 5 s after the scheduler starts; read with `go tool pprof -top`)",
    )
    p.add_argument("--json", type=Path, help="write results (timelines, CPU, spans) here")
    p.add_argument("--plot", type=Path, help="PNG of pods bound over time (needs matplotlib)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, ledger)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    everywhere = os.sched_getaffinity(0)  # before the bench pins itself with the plane
    workdir = Path(tempfile.mkdtemp(prefix="headroom-throughput-"))
    (workdir / "logs").mkdir()
    say(f"work directory {workdir}; building/using the control-plane binaries")
    plane = ControlPlane(
        workdir=workdir,
        bin_dir=build_binaries(workdir / "logs" / "build.log"),
        profiling=args.pprof is not None,
    )
    profiles = Profiles(plane, args.pprof) if args.pprof else None
    extender: Extender | None = None
    pg: PgServer | None = None
    results: list[RunResult] = []
    spans: dict[str, Any] = {}
    try:
        plane.start()
        if args.pin_plane:
            cpus = parse_cpus(args.pin_plane)
            for proc in plane.procs:
                if proc.popen is not None:
                    pin(proc.popen.pid, cpus)
            pin(os.getpid(), cpus)
        api = Api(plane)
        nodes = [f"node-{i:05d}" for i in range(args.nodes)]
        say(f"creating {len(nodes)} Ready nodes")
        create_nodes(api, nodes, say)
        pods = trace_pods(args.pods, args.seed)
        say(f"pod shapes (openb, seed {args.seed}): {shape_mix(pods)}")
        if args.runs in ("both", "without"):
            results.append(timed_run("without", api, plane, pods, None, args, profiles)[0])
        if args.runs in ("both", "with"):
            say("starting headroom serve and reporting every node")
            ext_cpus = (
                parse_cpus(args.pin_extender)
                if args.pin_extender
                else (everywhere if args.pin_plane else None)  # not the plane's, inherited
            )
            dsn = None
            if args.postgres:
                pg, dsn = start_postgres(ext_cpus)
                say(f"ledger in PostgreSQL at {dsn}")
            extender = Extender(
                workdir,
                plane.kubeconfig,
                spans=not args.no_spans,
                cpus=ext_cpus,
                db=dsn,
            )
            extender.start()
            extender.report_all(nodes, say)
            result, spans = timed_run("with", api, plane, pods, extender, args, profiles)
            results.append(result)
        api.close()
    finally:
        if extender is not None:
            extender.stop()
        if pg is not None:
            pg.stop()
        plane.stop()
    print_report(results, spans, args)
    if profiles is not None:
        for e in profiles.errors:
            say(f"pprof: {e}")
        say(f"\nGo CPU profiles in {args.pprof}: go tool pprof -top -cum BINARY FILE")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": vars(args)
                    | {k: str(getattr(args, k)) for k in ("json", "plot", "pprof")},
                    "runs": [asdict(r) for r in results],
                    "extender": spans,
                }
            )
        )
        say(f"\nresults: {args.json}")
    if args.plot:
        plot(results, args)
    if args.keep:
        say(f"work directory kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if all(r.bound == r.pods for r in results) else 1


def start_postgres(cpus: set[int] | None) -> tuple[PgServer, str]:
    """A throwaway PostgreSQL server (as the ledger tests start one), its postmaster
    pinned with the extender (the backends it forks inherit the set), and a database."""
    missing = binaries_missing()
    if missing:
        raise SystemExit(f"--postgres: {missing}")
    pg = PgServer().start()
    postmaster = int((pg.data / "postmaster.pid").read_text().split()[0])
    pin(postmaster, cpus)
    return pg, pg.create_db()


def plot(results: list[RunResult], args: argparse.Namespace) -> None:
    try:
        from bench.throughput_plot import plot_timelines
    except ImportError as e:  # matplotlib is not a dependency of the project
        say(f"no plot ({e}); write --json and run bench/throughput_plot.py where it is installed")
        return
    title = f"{args.nodes} nodes, {args.pods} pods"
    plot_timelines({r.name: r.timeline for r in results}, args.plot, title)
    say(f"plot: {args.plot}")


if __name__ == "__main__":
    sys.exit(main())
