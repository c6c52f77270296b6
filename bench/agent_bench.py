"""Agent cost per sample: CPU time to build + serialize one report, and its size.

Target (issue #4): under 1% of one core at a 1 s interval, i.e. < 10 ms CPU per sample,
for 8 GPUs x 50 processes. The NVML calls themselves are not in this number (no GPU
here); what is measured is everything the agent adds on top: attribution, report
building, leak check, metrics snapshot, JSON encoding.

Attribution modes:
  simulated     the simulator's own pid -> pod table (a dict lookup)
  cgroup        ProcAttributor reading /proc/<pid>/cgroup from a fake /proc tree on
                disk for every process, every sample (the uncached cost on a node)
  cgroup-cached the same behind CachedAttributor (what the agent really runs)

Run: .venv/bin/python bench/agent_bench.py [--samples N] [--gpus G] [--procs-per-gpu P]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
from prometheus_client import CollectorRegistry, generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drivers.agent.loop import Agent, build_report
from drivers.agent.metrics import AgentMetrics
from drivers.attribution.cgroup import ProcAttributor
from drivers.attribution.pods import Attributor, CachedAttributor
from drivers.gpu.simulated import SimulatedDriver
from extender.wire.clock import SystemClock
from extender.wire.report import PodGrant, ReportResponse

MODES = ("simulated", "cgroup", "cgroup-cached")


def loaded_node(gpus: int, procs_per_gpu: int) -> SimulatedDriver:
    """Every process its own pod: the worst case for per-pod aggregation and labels."""
    sim = SimulatedDriver(f"{gpus}xH100:80Gi", seed=1, node="bench")
    for g, uuid in enumerate(sim.gpu_uuids):
        for i in range(procs_per_gpu):
            sim.start_process(pod_uid(g, i), uuid, 1000 + 7 * i, sm_util=1.0)
    return sim


def pod_uid(gpu: int, i: int) -> str:
    return f"{gpu:08x}-0000-4000-8000-{i:012x}"


def fake_proc(sim: SimulatedDriver, root: Path) -> None:
    """A /proc/<pid>/cgroup per simulated PID, in the systemd + containerd v2 layout."""
    for dev in sim.sample():
        for p in dev.processes:
            a = sim.attribute(p.pid)
            assert a.pod_uid is not None and a.container_id is not None
            uid = a.pod_uid.replace("-", "_")  # systemd escapes the UID's dashes
            line = (
                "0::/kubepods.slice/kubepods-burstable.slice/"
                f"kubepods-burstable-pod{uid}.slice/cri-containerd-{a.container_id}.scope\n"
            )
            (root / str(p.pid)).mkdir()
            (root / str(p.pid) / "cgroup").write_text(line)


def attributor(mode: str, sim: SimulatedDriver, root: Path) -> Attributor:
    if mode == "simulated":
        return sim.attribute
    if mode == "cgroup":
        return ProcAttributor(root)
    return CachedAttributor(ProcAttributor(root))


def cpu_ms(fn: Callable[[], object], samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        t0 = time.process_time_ns()
        fn()
        out.append((time.process_time_ns() - t0) / 1e6)
    return out


def run_mode(mode: str, sim: SimulatedDriver, root: Path, samples: int) -> dict[str, float]:
    attribute = attributor(mode, sim, root)
    clock = SystemClock()
    encode = msgspec.json.Encoder().encode
    sizes: list[int] = []

    def report_only() -> None:
        sizes.append(len(encode(build_report(sim, "bench", attribute, clock))))

    metrics = AgentMetrics(CollectorRegistry())
    agent = Agent(sim, "bench", attribute, clock, metrics=metrics, interval_s=1.0)
    # Steady state: every pod has its grant (leaks are still computed every sample).
    grants = [
        PodGrant(pod_uid(g, i), "ns", "p", [u], 1000)
        for g, u in enumerate(sim.gpu_uuids)
        for i in range(len(sim.sample()[g].processes))
    ]
    agent.accept(ReportResponse(accepted=True, node="bench", received_at=0.0, grants=grants))

    def full_sample() -> None:
        encode(agent.sample())

    report_only()  # warm caches (CachedAttributor, imports) before measuring
    full_sample()
    sizes.clear()
    build = cpu_ms(report_only, samples)
    full = cpu_ms(full_sample, samples)
    scrape = cpu_ms(lambda: generate_latest(metrics.registry), max(10, samples // 10))
    return {
        "build_mean": statistics.fmean(build),
        "build_p99": _p99(build),
        "full_mean": statistics.fmean(full),
        "full_p99": _p99(full),
        "scrape_mean": statistics.fmean(scrape),
        "bytes": statistics.fmean(sizes),
    }


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 100 else max(values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs-per-gpu", type=int, default=50)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    args = ap.parse_args()

    sim = loaded_node(args.gpus, args.procs_per_gpu)
    print(
        f"# agent bench: {args.gpus} GPUs x {args.procs_per_gpu} processes "
        f"({args.gpus * args.procs_per_gpu} pods), {args.samples} samples, "
        f"python {sys.version.split()[0]}"
    )
    print()
    print(
        "| attribution | build+encode mean ms | p99 ms | + leaks/metrics snapshot mean ms "
        "| p99 ms | % of 1 core @1 s | /metrics render ms | report bytes |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fake_proc(sim, root)
        for mode in args.modes:
            r = run_mode(mode, sim, root, args.samples)
            print(
                f"| {mode} | {r['build_mean']:.2f} | {r['build_p99']:.2f} | {r['full_mean']:.2f} "
                f"| {r['full_p99']:.2f} | {r['full_mean'] / 10:.2f}% | {r['scrape_mean']:.2f} "
                f"| {r['bytes']:.0f} |"
            )


if __name__ == "__main__":
    main()
