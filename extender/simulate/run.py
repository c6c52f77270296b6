"""Run the simulation once per policy against a real extender and compare them."""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path

import msgspec
from tqdm import tqdm

from drivers.agent.loop import build_report
from drivers.gpu.simulated import SimulatedDriver
from extender.core.httpclient import make_client
from extender.core.table import align
from extender.ledger import chargeback_report
from extender.pricing import load_pricebook
from extender.scheduling.binder import InProcessBinder
from extender.scoring.batch import GpuBatch
from extender.scoring.fragmentation import fragmentation_of
from extender.settings import Settings
from extender.simulate.cluster import SimNode, make_cluster
from extender.simulate.scheduler import SchedulerDriver
from extender.simulate.server_thread import ServerThread
from extender.simulate.workload import SimPod, make_workload
from extender.wire.annotations import ANN_GPU_MEMORY_MIB, ANN_GPU_UUIDS
from extender.wire.clock import ManualClock
from extender.wiring import build

REPORT_EVERY_S = 120.0
TOKEN = "simulate-agent-token"


@dataclass
class PolicyResult:
    policy: str
    placed: int
    unplaceable: int
    allocation_rate: float  # granted / total GPU memory when arrivals end
    fragmentation: float  # share of free GPU memory the workload mix cannot use
    idle_gpus: int
    cluster_usd_per_hour: float  # nodes holding at least one pod (what Karpenter keeps)
    usd_per_gib_hour: float  # node cost over the run / GiB-hours granted
    on_demand_pods_on_spot: int
    ledger: str
    # the run's chargeback from its ledger, by namespace: USD as strings (exact)
    charges: dict[str, str] = field(default_factory=dict)
    idle_usd: str = "0"
    gpu_bill_usd: str = "0"  # the nodes' GPU cost over the run = charges + idle


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
            stale_after=10 * REPORT_EVERY_S,
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

    def report(self, client: object, node: str) -> None:
        rep = build_report(self.drivers[node], node, self.drivers[node].attribute, self.clock)
        rep.labels = self.nodes[node].labels
        client.post("/v1/reports", content=msgspec.json.encode(rep))  # type: ignore[attr-defined]

    def advance(self, t: float, client: object) -> None:
        self._integrate(t)
        while self.active and self.active[0][0] <= t:
            _, uid, node = heapq.heappop(self.active)
            client.post(f"/v1/pods/{uid}/release", params={"reason": "completed"})  # type: ignore[attr-defined]
            self.drivers[node].end_pod(uid)
            self.pods_on[node] -= 1
            self.report(client, node)

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

    def place(self, pod: SimPod, sched: SchedulerDriver, client: object) -> str | None:
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
        self.report(client, outcome.node)
        return outcome.node

    def execute(self, pods: list[SimPod], progress: tqdm) -> PolicyResult:
        placed = unplaceable = od_on_spot = 0
        self.t0 = self.clock.now()
        with ServerThread(self.built.app) as url, make_client(url, TOKEN) as client:
            for n in self.nodes:
                self.report(client, n)
            sched = SchedulerDriver(client, sorted(self.nodes), self.seed)
            next_round = self.t0 + REPORT_EVERY_S
            for pod in pods:
                t = self.t0 + pod.arrival_s
                while next_round <= t:
                    self.advance(next_round, client)
                    for n in self.nodes:
                        self.report(client, n)
                    next_round += REPORT_EVERY_S
                self.advance(t, client)
                node = self.place(pod, sched, client)
                if node is not None:
                    placed += 1
                    spot = self.nodes[node].capacity_type == "spot"
                    od_on_spot += pod.on_demand_only and spot
                else:
                    unplaceable += 1
                progress.update(1)
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
        )


def _table(results: list[PolicyResult]) -> str:
    head = (
        "policy",
        "placed",
        "unplaceable",
        "GPU mem alloc",
        "fragmentation",
        "idle GPUs",
        "$/h in use",
        "$/GiB-h",
        "on-demand pods on spot",
    )
    rows = [
        (
            r.policy,
            str(r.placed),
            str(r.unplaceable),
            f"{r.allocation_rate:.1%}",
            f"{r.fragmentation:.1%}",
            str(r.idle_gpus),
            f"{r.cluster_usd_per_hour:,.2f}",
            f"{r.usd_per_gib_hour:.4f}",
            str(r.on_demand_pods_on_spot),
        )
        for r in results
    ]
    return align([head, *rows], right_from=1, rule=True)


def _chargeback_table(results: list[PolicyResult]) -> str:
    """USD per namespace for each policy's run; charges + idle must equal the GPU bill."""
    namespaces = sorted({ns for r in results for ns in r.charges})
    head = ["chargeback (USD)", *(r.policy for r in results)]
    rows = [[ns, *(r.charges.get(ns, "0.00") for r in results)] for ns in namespaces]
    rows.append(["idle (granted to no pod)", *(r.idle_usd for r in results)])
    rows.append(["= GPU bill of the nodes", *(r.gpu_bill_usd for r in results)])
    balanced = all(
        sum(Decimal(v) for v in r.charges.values()) + Decimal(r.idle_usd) == Decimal(r.gpu_bill_usd)
        for r in results
    )
    check = "charges + idle = GPU bill, to the cent" if balanced else "MISMATCH: charges + idle"
    return align([head, *rows], right_from=1, rule=True) + f"\n{check}"


def main(args: argparse.Namespace) -> int:
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    nodes = make_cluster(args.nodes, args.seed, load_pricebook())
    pods = make_workload(args.pods, args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="headroom-sim-") as tmp:
        token_file = Path(tmp, "token")
        token_file.write_text(TOKEN)
        with tqdm(
            total=len(pods) * len(policies),
            desc="simulating",
            unit="pod",
            file=sys.stderr,
            disable=None,
        ) as progress:
            for policy in policies:
                progress.set_postfix_str(policy)
                db = _db_path(args.db, policy, len(policies), tmp)
                results.append(
                    _Run(policy, nodes, args, db, str(token_file)).execute(pods, progress)
                )
        if args.json:
            print(json.dumps([asdict(r) for r in results], indent=2))
        else:
            print(f"\n{len(nodes)} nodes, {len(pods)} pods, seed {args.seed}\n")
            print(_table(results))
            print()
            print(_chargeback_table(results))
        if args.plot:
            from extender.simulate.plot import plot

            plot(results, args.plot)
            print(f"\nplot written to {args.plot}", file=sys.stderr)
    return 0


def _db_path(db: str | None, policy: str, n_policies: int, tmp: str) -> str:
    if db is None:
        return str(Path(tmp, f"ledger-{policy}.db"))
    if n_policies == 1:
        return db
    p = Path(db)
    return str(p.with_name(f"{p.stem}-{policy}{p.suffix or '.db'}"))
