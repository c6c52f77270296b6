"""FGD's inflation method: keep submitting pods drawn from the trace (with replacement,
seeded) into a fixed cluster, no departures, until the arrived workload reaches
``max_arrived`` x capacity or ``fail_streak`` pods in a row found no node.

Per arrival it records the arrived workload and the allocation (both as fractions of the
cluster's GPU memory), the $/h of nodes in use (a node with a pod; Karpenter would have
removed an empty one) and the GiB delivered. Memory is the unit throughout: a whole GPU
counts its own memory when placed, and its pool's mean memory when it arrives.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from extender.scoring import Context, Evaluation, NodePolicy, Weights
from extender.scoring.batch import GpuBatch
from extender.scoring.fit import unit_mib
from extender.scoring.fragmentation import fragmentation_of

from .cluster import GIB, SPOT, SimNode
from .scheduler import Mode, Scheduler
from .trace import TracePod, nominal_mib


@dataclass
class Result:
    label: str
    mode: str
    capacity_gib: float
    gpus: int
    seed: int = 0
    arrived: int = 0
    placed: int = 0
    failed: int = 0
    od_on_spot: int = 0
    first_failure_at: float | None = None  # arrived workload (fraction) at the first failure
    curve: list[tuple[float, float, float, float]] = field(default_factory=list)
    # (arrived fraction, allocated fraction, $/h of nodes in use, delivered GiB)
    idle_gpus: int = 0
    frag_gib: float = 0.0
    cost_per_hour: float = 0.0

    @property
    def allocation(self) -> float:
        return self.curve[-1][1] if self.curve else 0.0

    def allocation_at(self, arrived: float) -> float:
        """Allocated fraction when the arrived workload first reached ``arrived``."""
        return next((a for x, a, _, _ in self.curve if x >= arrived), self.allocation)

    def cost_per_gib_hour_at(self, arrived: float) -> float:
        point = next((p for p in self.curve if p[0] >= arrived), self.curve[-1])
        return point[2] / point[3] if point[3] else 0.0

    def fill_cost_per_gib_hour(self, upto: float = 1.0) -> float:
        """Spend / delivered GiB-hours while the cluster fills at a constant arrival rate up
        to ``upto`` x capacity: sum over arrivals of $/h in use / sum of GiB delivered."""
        pts = [p for p in self.curve if p[0] <= upto]
        delivered = sum(p[3] for p in pts)
        return sum(p[2] for p in pts) / delivered if delivered else 0.0


def grants(ev: Evaluation, pod: TracePod, ctx: Context) -> list[tuple[int, int]]:
    return [(g.index, unit_mib(g, pod.demand, ctx.limits)) for g in ev.chosen]


def inflate(
    nodes: list[SimNode],
    trace: Sequence[TracePod],
    policy: NodePolicy,
    ctx: Context,
    weights: Weights,
    mode: Mode,
    narrowing: bool,
    seed: int,
    label: str,
    model_mem: dict[str, list[int]],
    max_arrived: float = 1.2,
    fail_streak: int = 200,
    decide: bool = False,
) -> Result:
    """Run one policy through the inflation method; ``nodes`` is consumed (mutated)."""
    capacity = sum(n.total_mib for n in nodes)
    res = Result(label, mode.name, capacity / GIB, sum(len(n.gpu_total_mib) for n in nodes), seed)
    sched = Scheduler(nodes, policy, ctx, weights, mode, narrowing, seed, decide)
    draw = random.Random(seed * 31 + 7)
    arrived_mib = allocated_mib = 0.0
    cost = 0.0
    streak = 0
    while arrived_mib < max_arrived * capacity and streak < fail_streak:
        pod = trace[draw.randrange(len(trace))]
        if not pod.demand.count:  # CPU-only: takes CPU and memory, is no GPU workload
            got = sched.schedule(pod)
            if got is not None:
                cost += got[0].per_hour if got[0].pods == 0 else 0.0
                got[0].commit([], pod.cpu_milli, pod.memory_mib)
            continue
        res.arrived += 1
        arrived_mib += nominal_mib(pod, model_mem)
        got = sched.schedule(pod)
        if got is None:
            res.failed += 1
            streak += 1
            if res.first_failure_at is None:
                res.first_failure_at = arrived_mib / capacity
        else:
            node, ev = got
            streak = 0
            res.placed += 1
            if node.pods == 0:
                cost += node.per_hour
            taken = grants(ev, pod, ctx)
            node.commit(taken, pod.cpu_milli, pod.memory_mib)
            allocated_mib += sum(mib for _, mib in taken)
            res.od_on_spot += int(pod.on_demand_only and node.capacity_type == SPOT)
        res.curve.append(
            (arrived_mib / capacity, allocated_mib / capacity, cost, allocated_mib / GIB)
        )
    res.cost_per_hour = cost
    res.idle_gpus = sum(1 for n in nodes for c in n.committed if c == 0)
    views = GpuBatch.from_views([n.view() for n in nodes], ctx.limits)
    res.frag_gib = sum(fragmentation_of(views, ctx.limits, ctx.mix).tolist()) / GIB
    return res
