"""Where a filter+prioritize pair spends its time, in-process, phase by phase: the
diagnosis behind bench/latency.py's ratios (no HTTP, no floor).

    .venv/bin/python bench/phases.py [--nodes 5000] [--pods 200] \
        [--shapes churn,cold,shuffled] [--varied]

The service is built as ``headroom serve`` builds it; simulated agents report every node.
Per pod: the shape's preparation (churn: 1% of the nodes report changed usage; shuffled:
the candidates in a new order), then filter and prioritize with the bodies
kube-scheduler sends, each decoded as the server decodes it (no prioritize when one node
passed: kube-scheduler takes it without scoring). The preparation is untimed
but, like the scheduler's process between two real requests, leaves caches cold. Phases
are timed by wrapping the service's methods; nested phases are included in their parent
(``patch`` includes ``evaluate``), so rows do not add up.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import extender.scheduling.cycle
import extender.scheduling.plans
from bench.latency import LABELS, pod
from drivers.agent.loop import build_report
from drivers.gpu.simulated import SimulatedDriver
from extender.codec import Codec
from extender.codec.namelists import NameList
from extender.core.runtime import tune_runtime
from extender.scheduling.service import SchedulingService
from extender.settings import Settings
from extender.wire.clock import SystemClock
from extender.wire.logs import setup_logging
from extender.wire.report import NodeReport
from extender.wiring import build

Times = defaultdict[str, list[float]]


def timed(owner: Any, name: str, label: str, times: Times) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            times[label].append(time.perf_counter() - t)

    setattr(owner, name, wrapper)


class Cluster:
    def __init__(self, service: SchedulingService, nodes: int, varied: bool = False) -> None:
        self.service = service
        self.clock = SystemClock()
        self.names = [f"node-{i:05d}" for i in range(nodes)]
        self.drivers: dict[str, SimulatedDriver] = {}
        for i in random.Random(11).sample(range(nodes), nodes):  # rows not in list order
            name = self.names[i]
            d = self.drivers[name] = SimulatedDriver(
                "4xA10G:24Gi", seed=i, node=name, clock=self.clock
            )
            for j, uuid in enumerate(d.gpu_uuids[: i % 4]):
                d.start_process(f"pod-{i}-{j}", uuid, 2048 * (1 + (i + j) % 8))
            if varied:  # no two nodes in the same state (bench/latency.py --varied)
                d.start_process(f"own-{i}", d.gpu_uuids[-1], 256 + i)
            self.send(name)

    def send(self, name: str) -> None:
        d = self.drivers[name]
        labels = {
            **LABELS,
            "karpenter.sh/capacity-type": "spot" if int(name[-5:]) % 2 else "on-demand",
        }
        report = build_report(d, name, d.attribute, self.clock, labels=labels)
        self.service.report(msgspec.json.decode(msgspec.json.encode(report), type=NodeReport))

    def churn(self, rng: random.Random) -> None:
        for name in rng.sample(self.names, max(1, len(self.names) // 100)):
            d = self.drivers[name]
            d.end_pod("churn")
            d.start_process("churn", rng.choice(d.gpu_uuids), rng.randrange(256, 4096))
            self.send(name)


def run(
    shape: str, nodes: int, pods: int, varied: bool = False
) -> tuple[list[float], list[float], Times]:
    with tempfile.TemporaryDirectory() as tmp:
        built = build(
            Settings(db=f"{tmp}/phases.db", allow_unauthenticated_reports=True, stale_after=3600)
        )
        service = built.service
        cluster = Cluster(service, nodes, varied)
        # the reports' ledger writes done before anything is timed (bench/latency.py waits
        # for them too): the writer thread took the interpreter lock from timed filters
        service.writer.flush(600.0)
        tune_runtime()
        codec = Codec(service.node_changed)
        times: Times = defaultdict(list)
        for owner, name, label in [
            (codec, "decode_args", "decode body"),
            (service.asks, "remember", "read demand"),
            (service.cycle, "_plan", "plan"),
            (extender.scheduling.plans, "_patch", "patch"),
            (service.evaluator, "names", "evaluate"),
            (extender.scheduling.cycle, "filter_reply", "filter answer"),
            (extender.scheduling.cycle, "passing_priorities", "passing scores"),
        ]:
            timed(owner, name, label, times)
        rng = random.Random(7)
        filters, prioritizes = [], []

        def body(i: int, names: list[str] | bytes) -> bytes:
            """As Go writes ExtenderArgs; ``names`` as a list, or as JSON already."""
            memory = 1024 + i if shape == "cold" else 4096
            listed = names if isinstance(names, bytes) else msgspec.json.encode(names)
            return b"".join(
                (
                    b'{"Pod":',
                    msgspec.json.encode(pod(i, memory)),
                    b',"Nodes":null,"NodeNames":',
                    listed,
                    b"}",
                )
            )

        for i in range(pods + 1):
            if shape == "churn":
                cluster.churn(rng)
            order = rng.sample(cluster.names, nodes) if shape == "shuffled" else cluster.names
            first = body(i, order)
            t = time.perf_counter()
            result, _ = service.filter(codec.decode_args(first))
            filtered = time.perf_counter() - t
            passing: list[str] | bytes = list(result.NodeNames or [])
            if isinstance(result.NodeNames, NameList):  # as the server does (untimed here)
                codec.encode_filter(result, None)
                passing = result.NodeNames.json()  # the reply's bytes, echoed
            prioritized = 0.0
            if len(result.NodeNames or []) != 1:
                second = body(i, passing)
                t = time.perf_counter()
                service.prioritize(codec.decode_args(second))
                prioritized = time.perf_counter() - t
            if i == 0:  # the first pod builds the plan every shape starts from
                for v in times.values():
                    v.clear()
                continue
            filters.append(filtered)
            prioritizes.append(prioritized)
        built.service.writer.close()
        return filters, prioritizes, times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--shapes", default="warm,churn,cold,shuffled")
    ap.add_argument("--varied", action="store_true", help="every node in a state of its own")
    args = ap.parse_args()
    setup_logging("error")
    print("| shape | filter p50 µs | prioritize p50 µs | phase | calls per pod | µs per pod |")
    print("|---|---:|---:|---|---:|---:|")
    for shape in args.shapes.split(","):
        filters, prioritizes, times = run(shape, args.nodes, args.pods, args.varied)
        head = [
            shape,
            f"{statistics.median(filters) * 1e6:.0f}",
            f"{statistics.median(prioritizes) * 1e6:.0f}",
        ]
        for label, spent in times.items():
            print(
                f"| {' | '.join(head)} | {label} | {len(spent) / args.pods:.1f} | "
                f"{sum(spent) / args.pods * 1e6:.0f} |",
                flush=True,
            )
            head = ["", "", ""]


if __name__ == "__main__":
    main()
