"""Run the simulation once per policy against a real extender and compare them.

Each policy's run starts a real extender (``extender.wiring.build``) on a loopback
socket; simulated agents report to it over HTTP and a simulated kube-scheduler drives
filter, prioritize and bind through it, on a manual clock. An agent reports when its
node changed (a pod started or ended) and otherwise only before its last report would
go stale: between those moments a simulated GPU reads the same, and re-sending it was
nine in ten of the requests and three quarters of the time of a run (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import msgspec

from drivers.agent.loop import build_report
from drivers.gpu.simulated import SimulatedDriver
from extender.ledger import chargeback_report
from extender.pricing import load_pricebook
from extender.scheduling.binder import InProcessBinder
from extender.scoring.batch import GpuBatch
from extender.scoring.fragmentation import fragmentation_of
from extender.settings import Settings
from extender.simulate.cluster import SimNode, make_cluster
from extender.simulate.flags import ledger_paths
from extender.simulate.loopback import LoopbackClient
from extender.simulate.progress import Progress
from extender.simulate.results import PolicyResult, chargeback_table, policy_table
from extender.simulate.scheduler import SchedulerDriver
from extender.simulate.server_thread import ServerThread
from extender.simulate.workers import run_policies
from extender.simulate.workload import SimPod, make_workload
from extender.wire.annotations import ANN_GPU_MEMORY_MIB, ANN_GPU_UUIDS
from extender.wire.clock import ManualClock
from extender.wiring import build

REPORT_EVERY_S = 120.0  # the simulated clock's tick: pods that ended are released on it
STALE_AFTER_S = 10 * REPORT_EVERY_S
HEARTBEAT_S = STALE_AFTER_S - REPORT_EVERY_S  # an unchanged node reports this often
TOKEN = "simulate-agent-token"
SCRATCH_MIN_FREE = 512 << 20  # bytes free on /dev/shm to keep throwaway ledgers there


class _Run:
    """One policy's run: a real extender on loopback, simulated agents, the workload."""

    def __init__(
        self, policy: str, nodes: list[SimNode], args: argparse.Namespace, db: str, token_file: str
    ) -> None:
        self.clock = ManualClock()
        self.binder = InProcessBinder()
        settings = Settings(
            db=db,
            policy=policy,
            cost_weight=args.cost_weight,
            agent_token_file=token_file,
            stale_after=STALE_AFTER_S,
        )
        self.built = build(settings, clock=self.clock, binder=self.binder)
        self.nodes = {n.name: n for n in nodes}
        self.drivers = {
            n.name: SimulatedDriver(n.spec, args.seed, n.name, self.clock) for n in nodes
        }
        self.policy = policy
        self.seed = args.seed
        self.active: list[tuple[float, str, str]] = []  # (end time, uid, node)
        self.pods_on: dict[str, int] = dict.fromkeys(self.nodes, 0)
        self.cost_integral = 0.0
        self.gib_integral = 0.0
        self.last_t = self.clock.now()
        self.db = db
        self.t0 = self.clock.now()
        self.reported: dict[str, float] = {}  # node -> when its agent last reported
        self.changed: set[str] = set()  # nodes whose GPUs changed since they reported
        self.reports = 0

    def report(self, client: LoopbackClient, node: str) -> None:
        rep = build_report(self.drivers[node], node, self.drivers[node].attribute, self.clock)
        rep.labels = self.nodes[node].labels
        client.post("/v1/reports", msgspec.json.encode(rep))
        self.reported[node] = self.clock.now()
        self.changed.discard(node)
        self.reports += 1

    def report_due(self, client: LoopbackClient) -> None:
        """Before the scheduler looks: every node that changed, and every node whose last
        report would soon be stale. The extender then sees what a per-tick report would
        have shown it, so placements are the same."""
        now = self.clock.now()
        for n in self.nodes:
            if n in self.changed or now - self.reported.get(n, -math.inf) >= HEARTBEAT_S:
                self.report(client, n)

    def advance(self, t: float, client: LoopbackClient) -> None:
        self._integrate(t)
        while self.active and self.active[0][0] <= t:
            _, uid, node = heapq.heappop(self.active)
            client.post(f"/v1/pods/{uid}/release", params={"reason": "completed"})
            self.drivers[node].end_pod(uid)
            self.pods_on[node] -= 1
            self.changed.add(node)

    def _integrate(self, t: float) -> None:
        dt_h = (t - self.last_t) / 3600
        if dt_h > 0:
            inv = self.built.service.inventory
            for name, count in self.pods_on.items():
                price = inv.price(name)
                if count and price is not None:
                    self.cost_integral += float(price.per_hour) * dt_h
            self.gib_integral += self.granted_mib() / 1024 * dt_h
        self.last_t = max(self.last_t, t)
        self.clock.set(max(self.clock.now(), t))

    def granted_mib(self) -> int:
        inv = self.built.service.inventory
        return sum(g.reserved_mib for n in self.nodes if (v := inv.view(n)) for g in v.gpus)

    def place(self, pod: SimPod, sched: SchedulerDriver) -> str | None:
        """Schedule one pod; on success start its processes and return its node."""
        outcome = sched.schedule(pod.manifest())
        if outcome.node is None:
            return None
        ann = self.binder.annotations_of(pod.uid)
        mib = int(ann[ANN_GPU_MEMORY_MIB])
        driver = self.drivers[outcome.node]
        for uuid in ann[ANN_GPU_UUIDS].split(","):
            driver.start_process(pod.uid, uuid, int(mib * pod.usage_fraction))
        heapq.heappush(
            self.active, (pod.arrival_s + self.t0 + pod.lifetime_s, pod.uid, outcome.node)
        )
        self.pods_on[outcome.node] += 1
        self.changed.add(outcome.node)
        return outcome.node

    def execute(self, pods: list[SimPod], advance: Callable[[int], None]) -> PolicyResult:
        placed = unplaceable = od_on_spot = 0
        self.t0 = self.clock.now()
        with ServerThread(self.built.app) as url, LoopbackClient(url, TOKEN) as client:
            self.report_due(client)  # every agent's first report
            sched = SchedulerDriver(client, sorted(self.nodes), self.seed)
            next_round = self.t0 + REPORT_EVERY_S
            for pod in pods:
                t = self.t0 + pod.arrival_s
                while next_round <= t:
                    self.advance(next_round, client)
                    next_round += REPORT_EVERY_S
                self.advance(t, client)
                self.report_due(client)
                node = self.place(pod, sched)
                if node is not None:
                    placed += 1
                    spot = self.nodes[node].capacity_type == "spot"
                    od_on_spot += pod.on_demand_only and spot
                else:
                    unplaceable += 1
                advance(1)
            self.report_due(client)  # the last placements, as the agents would show them
            result = self._result(placed, unplaceable, od_on_spot)
        return self._charge(result)

    def _charge(self, result: PolicyResult) -> PolicyResult:
        """Bill the run from its own ledger: what each namespace received, and idle."""
        svc = self.built.service
        svc.writer.flush()
        now = self.clock.now()
        report = chargeback_report(svc.ledger, self.t0, now, "namespace", now)
        result.charges = {g.key: str(g.cost) for g in report.groups}
        result.idle_usd = str(report.total_idle)
        result.gpu_bill_usd = str(report.total_node_cost)
        svc.ledger.close()
        return result

    def _result(self, placed: int, unplaceable: int, od_on_spot: int) -> PolicyResult:
        svc = self.built.service
        views = [v for n in self.nodes if (v := svc.inventory.view(n))]
        total = sum(v.total_mib for v in views)
        lim = svc.config.limits
        batch = GpuBatch.from_views(views, lim)
        frag = sum(fragmentation_of(batch, lim, svc.mix.mix).tolist(), 0.0)
        free = float((batch.free(lim).clip(min=0) * batch.present).sum())  # plain GPUs'
        in_use = sum(
            float(p.per_hour)
            for n, c in self.pods_on.items()
            if c and (p := svc.inventory.price(n))
        )
        return PolicyResult(
            policy=self.policy,
            placed=placed,
            unplaceable=unplaceable,
            allocation_rate=self.granted_mib() / total if total else 0.0,
            fragmentation=frag / free if free else 0.0,
            idle_gpus=sum(1 for v in views for g in v.gpus if g.reserved_mib == 0),
            cluster_usd_per_hour=in_use,
            usd_per_gib_hour=self.cost_integral / self.gib_integral if self.gib_integral else 0.0,
            on_demand_pods_on_spot=int(od_on_spot),
            ledger=self.db,
            reports=self.reports,
        )


def main(args: argparse.Namespace) -> int:
    policies: list[str] = args.policy
    dbs = ledger_paths(args.db, policies) if args.db else {}
    nodes = make_cluster(args.nodes, args.seed, load_pricebook())
    pods = make_workload(args.pods, args.seed)
    with tempfile.TemporaryDirectory(prefix="headroom-sim-", dir=_scratch()) as tmp:
        token_file = Path(tmp, "token")
        token_file.write_text(TOKEN)

        def run_one(policy: str, advance: Callable[[int], None]) -> PolicyResult:
            db = dbs.get(policy) or str(Path(tmp, f"ledger-{policy}.db"))
            return _Run(policy, nodes, args, db, str(token_file)).execute(pods, advance)

        progress = Progress(len(pods) * len(policies))
        try:
            results = run_policies(
                policies,
                run_one,
                args.jobs or _cpus(),
                progress.advance,
                lambda r: progress.finished(r.policy, r.placed, len(pods)),
            )
        finally:
            progress.close()
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(f"\n{len(nodes)} nodes, {len(pods)} pods, seed {args.seed}\n")
        print(policy_table(results))
        print()
        print(chargeback_table(results))
    for policy, db in dbs.items():
        print(f"ledger of {policy} written to {db}", file=sys.stderr)
    if args.plot:
        from extender.simulate.plot import plot

        plot(results, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _cpus() -> int:
    """The CPUs this process may run on (a container's share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _scratch() -> str | None:
    """Where the throwaway ledgers go: memory-backed /dev/shm when it has room, where a
    commit's fsync costs nothing (the default temp folder otherwise). A ledger named
    with ``--db`` is written where it is named, durably, as ``serve`` writes it."""
    shm = "/dev/shm"
    try:
        ok = os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > SCRATCH_MIN_FREE
    except OSError:
        ok = False
    return shm if ok else None
