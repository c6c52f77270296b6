"""kube-scheduler's arithmetic around the extender, as the evaluator models it.

kube mode (what a real cluster does, docs/protocol.md §1.5-1.6):
 1. in-tree Filter: the pod's allowed GPU models (NodeAffinity) and NodeResourcesFit on
    CPU/memory; it stops after numFeasibleNodesToFind feasible nodes (>= 100; else
    (50 - N/125)% of N, at least 5%), starting where the previous pod stopped.
 2. extender filter: the nodes scored at once (``evaluate_batch``, the filter's path;
    ``evaluate`` node by node for MIG demands and for the baselines), cached by node
    version and demand as ``SchedulingService`` does; with narrowing, only
    ``narrow(...)`` passes (with deciding, its best node alone).
 3. one node left: it is taken, prioritize is not called.
 4. total(n) = priorities(n) x weight x 10 + LeastAllocated(n) + BalancedAllocation(n)
    LeastAllocated = ((C - c') * 100 // C + (M - m') * 100 // M) // 2  (c', m': requested
    CPU/memory after the pod, C, M allocatable); BalancedAllocation = int((1 - |c'/C -
    m'/M| / 2) * 100); the other default score plugins score all nodes alike here.
 5. the highest total wins; ties at random (seeded).
ideal mode (the policy on its own, as papers report it): every node, the unrounded blend
``narrowing.blended``, ties to the first node in cluster order.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from extender.scoring import Context, Evaluation, NodePolicy, Weights, evaluate, priorities
from extender.scoring.batch import GpuBatch
from extender.scoring.fit import fitting_gpus
from extender.scoring.framework import evaluate_batch
from extender.scoring.hostonly import host_priorities
from extender.scoring.narrowing import blended, narrow
from extender.scoring.policy import HostScorer, Policy

from .cluster import SimNode
from .trace import TracePod

MIN_FEASIBLE = 100
MIN_PERCENT = 5


@dataclass(frozen=True)
class Mode:
    name: str
    kube: bool  # integer scores + in-tree plugins + random ties + node sampling
    extender_weight: int = 5  # manifests/scheduler/kube-scheduler-config.yaml
    # manifests/scheduler/kube-scheduler-config.yaml ships 100; 0: the adaptive default
    percentage_of_nodes_to_score: int = 100


KUBE = Mode("kube", kube=True)
IDEAL = Mode("ideal", kube=False)


def num_feasible_to_find(n: int, percentage: int = 0) -> int:
    """kube-scheduler's numFeasibleNodesToFind (integer arithmetic as in schedule_one.go)."""
    if n < MIN_FEASIBLE:
        return n
    if percentage == 0:
        percentage = max(50 - n // 125, MIN_PERCENT)
    return max(n * percentage // 100, MIN_FEASIBLE)


def in_tree_fits(node: SimNode, pod: TracePod) -> bool:
    if pod.models and node.model not in pod.models:
        return False
    return (
        node.cpu_used + pod.cpu_milli <= node.cpu_milli
        and node.mem_used + pod.memory_mib <= node.memory_mib
    )


def least_allocated(node: SimNode, pod: TracePod) -> int:
    cpu = _least(node.cpu_used + pod.cpu_milli, node.cpu_milli)
    mem = _least(node.mem_used + pod.memory_mib, node.memory_mib)
    return (cpu + mem) // 2


def _least(requested: int, capacity: int) -> int:
    if capacity <= 0 or requested > capacity:
        return 0
    return (capacity - requested) * 100 // capacity


def balanced_allocation(node: SimNode, pod: TracePod) -> int:
    fc = min(1.0, (node.cpu_used + pod.cpu_milli) / max(node.cpu_milli, 1))
    fm = min(1.0, (node.mem_used + pod.memory_mib) / max(node.memory_mib, 1))
    return int((1 - abs(fc - fm) / 2) * 100)


class Scheduler:
    """Places pods one by one on ``nodes`` with one policy, weights and mechanism."""

    def __init__(
        self,
        nodes: list[SimNode],
        policy: NodePolicy,
        ctx: Context,
        weights: Weights,
        mode: Mode,
        narrowing: bool,
        seed: int,
        decide: bool = False,
    ) -> None:
        self.nodes = nodes
        self.by_name = {n.name: n for n in nodes}
        self.policy, self.ctx, self.weights = policy, ctx, weights
        self.mode, self.narrowing, self.decide = mode, narrowing, decide
        self.rng = random.Random(seed)
        self.prices = {n.name: n.per_gib_hour for n in nodes}
        self._start = 0
        self._cache: dict[Hashable, Evaluation] = {}

    def candidates(self, pod: TracePod) -> list[SimNode]:
        """Step 1: in-tree filter, with kube-scheduler's node sampling in kube mode."""
        n = len(self.nodes)
        want = (
            num_feasible_to_find(n, self.mode.percentage_of_nodes_to_score) if self.mode.kube else n
        )
        found: list[SimNode] = []
        processed = 0
        for k in range(n):
            if len(found) >= want:
                break
            node = self.nodes[(self._start + k) % n]
            processed += 1
            if in_tree_fits(node, pod):
                found.append(node)
        if self.mode.kube:
            self._start = (self._start + processed) % n
        return found

    def evaluations(self, nodes: Sequence[SimNode], pod: TracePod) -> dict[str, Evaluation]:
        """Step 2's evaluations by node name. Those not cached are scored in one batch
        when the policy has a vectorised score and the demand is plain; a batch
        evaluation holds no chosen GPUs (``landed`` evaluates the node taken)."""
        d = pod.demand
        keys = [(n.name, n.version, d.key, d.capacity) for n in nodes]
        todo = [(n, k) for n, k in zip(nodes, keys, strict=True) if k not in self._cache]
        if todo and (d.mig_profile or not hasattr(self.policy, "score_batch")):
            for n, k in todo:
                self._cache[k] = evaluate(n.view(), d, self.policy, self.ctx)
        elif todo:
            batch = GpuBatch.from_views([n.view() for n, _ in todo], self.ctx.limits)
            fits, raw = evaluate_batch(batch, d, cast(Policy, self.policy), self.ctx)
            for (_, k), ok, r in zip(todo, fits.tolist(), raw.tolist(), strict=True):
                self._cache[k] = Evaluation(ok, raw=r)
        return {n.name: self._cache[k] for n, k in zip(nodes, keys, strict=True)}

    def landed(self, node: SimNode, pod: TracePod, ev: Evaluation) -> Evaluation:
        """The evaluation of the node the pod lands on, with its chosen GPUs (placed
        here when the batch scored it: ``evaluate``'s place step alone)."""
        if ev.chosen:
            return ev
        view, d = node.view(), pod.demand
        chosen = self.policy.place(view, d, fitting_gpus(view, d, self.ctx.limits), self.ctx)
        return Evaluation(True, chosen=chosen, raw=ev.raw)

    def passing(self, evals: Mapping[str, Evaluation]) -> list[str]:
        """Step 2: the extender filter's passing set, in candidate order."""
        if self.narrowing:
            keep = narrow(evals, self.prices, self.weights, decide=self.decide)
            return [name for name in evals if name in keep]
        return [name for name, e in evals.items() if e.fits]

    def pick(self, pod: TracePod, evals: Mapping[str, Evaluation], names: list[str]) -> str:
        """Steps 3-5 (kube) or the unrounded argmax (ideal)."""
        if len(names) == 1:
            return names[0]
        subset = {name: evals[name] for name in names}
        if not self.mode.kube:
            b = blended(subset, self.prices, self.weights)
            return max(names, key=lambda name: b[name])  # first of equals wins
        ext = priorities(subset, self.prices, self.weights)
        w = self.mode.extender_weight * 10
        total = {}
        for name in names:
            node = self.by_name[name]
            total[name] = (
                ext[name] * w + least_allocated(node, pod) + balanced_allocation(node, pod)
            )
        top = max(total.values())
        return self.rng.choice([name for name in names if total[name] == top])

    def schedule(self, pod: TracePod) -> tuple[SimNode, Evaluation] | None:
        """The node the pod lands on and the extender's evaluation there, or None."""
        if not pod.demand.count:
            return self.schedule_cpu_only(pod)
        evals = self.evaluations(self.candidates(pod), pod)
        names = self.passing(evals)
        if not names:
            return None
        node = self.by_name[self.pick(pod, evals, names)]
        return node, self.landed(node, pod, evals[node.name])

    def schedule_cpu_only(self, pod: TracePod) -> tuple[SimNode, Evaluation] | None:
        """A pod asking no GPU: the extender passes every node (``cycle.filter``'s no-GPU
        path) and scores them with the policy's ``HostScorer`` (``cycle.prioritize``;
        flat without one), beside the in-tree scores."""
        found = self.candidates(pod)
        if not found:
            return None
        ext = self.host_priorities(found, pod)
        w = self.mode.extender_weight * 10
        total = {
            n.name: ext[i] * w + least_allocated(n, pod) + balanced_allocation(n, pod)
            for i, n in enumerate(found)
        }
        top = max(total.values())
        best = [n for n in found if total[n.name] == top]
        node = self.rng.choice(best) if self.mode.kube else best[0]
        return node, Evaluation(True)

    def host_priorities(self, nodes: Sequence[SimNode], pod: TracePod) -> list[int]:
        """The extender's prioritize integers for a pod asking no GPU."""
        d = pod.demand
        if not isinstance(self.policy, HostScorer) or not (d.cpu_milli or d.host_memory_mib):
            return [0] * len(nodes)
        batch = GpuBatch.from_views([n.view() for n in nodes], self.ctx.limits)
        rows = np.arange(len(nodes), dtype=np.int64)
        return host_priorities(self.policy.score_host_rows(batch, rows, d, self.ctx)).tolist()
