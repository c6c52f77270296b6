"""filter and prioritize: the scheduling cycle's questions, answered from plans.

Each pod's candidates are evaluated once per shape and list (``plans``), and the
replies are kept with the plan (``replies``); a report or a bind changes a few nodes,
and only those are evaluated again. The shapes scheduled lately get their plans
brought up to date off the cycle, after a report or a bind is answered
(``refresh``, ``hotshapes``), and a pod the pod watch announced gets its plan made
before its filter (``prepare``, ``announced``). DRA asks are evaluated afresh every
time (no columns).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence

import msgspec
import numpy as np

from extender.core.allocation import PodRef
from extender.ledger.metrics import SCHEDULING
from extender.scheduling.announced import Announced
from extender.scheduling.asks import Asks
from extender.scheduling.config import ServiceConfig
from extender.scheduling.evaluate import Evaluator
from extender.scheduling.hotshapes import HotShapes
from extender.scheduling.plans import Plan, Plans, Source
from extender.scheduling.replies import (
    FilterReply,
    filter_reply,
    passing_priorities,
    priorities,
)
from extender.scoring.batch import Ints
from extender.scoring.hostonly import host_priorities
from extender.state.demand import DemandError, GpuDemand, states_preferences
from extender.state.inventory import Inventory
from extender.state.nodefacts import facts_from_node
from extender.state.podcache import pod_ref
from extender.wire.clock import Clock
from extender.wire.names import Priorities, same_names
from extender.wire.protocol import (
    ExtenderArgs,
    ExtenderFilterResult,
    Pod,
    RawNodeList,
    node_decoder,
)

log = logging.getLogger("headroom.service")
DEFAULT_PROFILE = "default-scheduler"  # a pod's scheduler when it names none
Unplaceable = Callable[[PodRef, dict[str, str]], None]


class Cycle:
    """filter, prioritize and the plans' refresh; used from the event loop alone."""

    def __init__(
        self,
        inventory: Inventory,
        asks: Asks,
        evaluator: Evaluator,
        clock: Clock,
        config: ServiceConfig,
    ) -> None:
        self.inventory, self.asks, self.evaluator = inventory, asks, evaluator
        self.clock, self.config = clock, config
        self.plans = Plans()
        self.hot = HotShapes(config.refresh_shapes, config.refresh_window)
        # the candidates of the latest filter for device-plugin GPUs: what ``prepare``
        # plans for (kube-scheduler's lists repeat, permuted, from pod to pod)
        self.latest: Sequence[str] = ()
        # the scheduler profiles the filter has been asked for (others' pods: not ours)
        self.profiles: set[str] = set()
        self.announced = Announced(
            self.prepare, clock.now, config.plan_ahead, config.refresh_window
        )
        # Kubernetes Events / metrics for pods that fit nowhere
        self.unplaceable_hooks: list[Unplaceable] = [
            lambda pod, _: SCHEDULING.no_fit.labels(pod.namespace).inc()
        ]
        # a pass over every candidate, made "cycle" (in kube-scheduler's wait) or "ahead"
        passes = {when: SCHEDULING.passes.labels(when=when) for when in ("cycle", "ahead")}
        self.pass_hooks: list[Callable[[str], None]] = [lambda when: passes[when].inc()]

    def filter(self, args: ExtenderArgs) -> tuple[ExtenderFilterResult, list[msgspec.Raw] | None]:
        """Passing set always returned; every failed node gets a reason a person can act
        on. In Nodes mode the passing Node objects come back as the raw items."""
        raws = args.Nodes.items if args.Nodes is not None else None
        if args.Pod is None:
            return ExtenderFilterResult(Error="request has no Pod"), None
        try:
            demand = self.asks.remember(args.Pod)
        except DemandError as e:
            return ExtenderFilterResult(Error=f"pod {_name(args.Pod)}: {e}"), None
        if not demand.wants_gpu:  # near-zero cost path: everything passes, nothing decoded
            if raws is not None:
                return ExtenderFilterResult(), list(raws)
            return ExtenderFilterResult(NodeNames=list(args.NodeNames or [])), None
        names, now = self.names(args), self.clock.now()
        if demand.count:  # device-plugin GPUs: its plans are patched after reports
            self.hot.touch(demand, now)
            self.latest = names
            self.profiles.add(args.Pod.spec.schedulerName or DEFAULT_PROFILE)
            self.announced.filtered(args.Pod.metadata.uid)
        decide = self.config.decide and not states_preferences(args.Pod)
        reply = self._filter_reply(self._plan(args.Pod, demand, names, now), demand, decide)
        if not len(reply.passing) and names:
            self._unplaceable(args.Pod, reply.result)
        if raws is not None:
            kept = [raws[i] for i in reply.passing.tolist()]
            return msgspec.structs.replace(reply.result, NodeNames=None), kept
        return reply.result, None

    def prioritize(self, args: ExtenderArgs) -> Priorities:
        """Each candidate's score, kept with the plan (a repeat costs a lookup)."""
        if args.Pod is None:
            raise ValueError("request has no Pod")
        demand = self.asks.remember(args.Pod)
        names = self.names(args)
        if not demand.wants_gpu:
            return self._host_only(demand, names)
        now = self.clock.now()
        passed = self._passed_by(demand, names, now)
        if passed is not None:
            return passing_priorities(
                passed, self._filter_reply(passed, demand), self.config.weights
            )
        return priorities(self._plan(args.Pod, demand, names, now), self.config.weights)

    def _host_only(self, demand: GpuDemand, names: Sequence[str]) -> Priorities:
        """A pod that asks no GPU: steered off the CPU and memory idle GPUs need, when it
        asks for some and the policy scores such pods; else flat scores."""
        raw = None
        if names and (demand.cpu_milli or demand.host_memory_mib):
            raw = self.evaluator.host_only(names, demand, self.clock.now())
        if raw is None:
            return Priorities(names, np.zeros(len(names), np.int64))
        return Priorities(names, host_priorities(raw))

    def prepare(self, pod: Pod, demand: GpuDemand) -> bool:
        """A pod the pod watch saw pending (``announced``), on the event loop before
        kube-scheduler's filter for it: its plan for the latest candidate list and the
        filter's answer made now. False, nothing made, where no filter would use them:
        none has come yet, the pod is another scheduler profile's, or its filter came
        first. The pod itself is not remembered, and joins the workload mix after its
        own filter as it would without this (``Asks.settle``), so every answer is the
        filter's own and the plan is keyed by the mix version that filter finds."""
        names, profile = self.latest, pod.spec.schedulerName or DEFAULT_PROFILE
        if not names or profile not in self.profiles or self.asks.seen(pod.metadata.uid):
            return False
        self.asks.settle()  # the pods filtered before it: the mix its filter will find
        decide = self.config.decide and not states_preferences(pod)
        plan = self._plan(pod, demand, names, self.clock.now(), "ahead")
        self._filter_reply(plan, demand, decide)
        return True

    def refresh(self) -> int:
        """Brings the widest plan of each shape filtered lately up to date and makes its
        filter answer, if that shape's latest filter asked for it (``Plans.parent``);
        returns the plans refreshed."""
        now, done = self.clock.now(), 0
        for demand in self.hot.recent(now):
            parent = self.plans.parent(*self._source(demand, now), asked=True)
            if parent is None:  # none, not asked for, or to be rebuilt: the next filter does
                continue
            reply = self._filter_reply(parent, demand, self.config.decide)
            if not self.config.decide:  # a decided pod's filter passes one node: no scores
                passing_priorities(parent, reply, self.config.weights)
            done += 1
        return done

    def names(self, args: ExtenderArgs) -> Sequence[str]:
        """The candidates' names: as decoded, or read from the Node objects (a caller
        that decoded only the raw items; the edge's codec names them itself)."""
        if args.NodeNames is not None:
            return args.NodeNames
        if args.Nodes is None:
            return []
        return node_names(args.Nodes, self.inventory)

    def _passed_by(self, demand: GpuDemand, names: Sequence[str], now: float) -> Plan | None:
        """The shape's widest plan when ``names`` are the nodes its filter passed, as
        listed (the filter's reply echoed back as prioritize's candidates); else None."""
        if not demand.count:
            return None
        parent = self.plans.parent(*self._source(demand, now))
        reply = parent.replies.filter if parent is not None else None
        if reply is None or reply.result.NodeNames is None:
            return None
        return parent if same_names(names, reply.result.NodeNames) else None

    def _filter_reply(self, plan: Plan, demand: GpuDemand, decide: bool = False) -> FilterReply:
        eps = self.config.narrow_epsilon if demand.count > 0 else None
        return filter_reply(plan, eps, self.config.weights, decide)

    def _unplaceable(self, pod: Pod, result: ExtenderFilterResult) -> None:
        reasons = {**result.FailedNodes, **result.FailedAndUnresolvableNodes}
        ref = pod_ref(pod)
        for hook in self.unplaceable_hooks:
            try:
                hook(ref, reasons)
            except Exception:
                log.exception("unplaceable hook failed")

    def _plan(
        self, pod: Pod, demand: GpuDemand, names: Sequence[str], now: float, why: str = "cycle"
    ) -> Plan:
        """Each candidate's evaluation for this pod (device-plugin GPUs or DRA claims),
        and where the replies made from them are kept (dropped on change). A pass over
        every candidate is told to ``pass_hooks`` with ``why`` (a metric's label)."""
        if demand.count == 0 and demand.dra_claims:
            outcome = self.evaluator.dra_names(pod, names, now)
            return Plan.of(names, -1, outcome, self.config.stale_after)
        before = self.plans.passes
        plan = self.plans.plan(names, *self._source(demand, now))
        if self.plans.passes != before:
            for hook in self.pass_hooks:
                hook(why)
        return plan

    def _source(self, demand: GpuDemand, now: float) -> tuple[Hashable, Source]:
        """The key plans for this demand are kept under, and what they are made from."""
        return (demand.key, demand.capacity, self.asks.mix.version), Source(
            now,
            self.inventory.seq,
            self._changed,
            lambda subset, rows: self.evaluator.names(subset, rows, demand, now),
            self.config.stale_after,
            lambda subset: self.inventory.columns().rows(subset),
        )

    def _changed(self, plan: Plan) -> Ints | None:
        return self.inventory.columns().changed(plan.rows, plan.layout, plan.seq)


def node_names(nodes: RawNodeList, inventory: Inventory) -> list[str]:
    """Every Node object's name, its facts applied to the inventory; all items are read
    before any facts are applied, so a bad item (msgspec.ValidationError) leaves no
    partial state behind."""
    decoded = [node_decoder.decode(raw) for raw in nodes.items]
    for i, node in enumerate(decoded):
        if not node.metadata.name:
            raise msgspec.ValidationError(f"Nodes.items[{i}] has no metadata.name")
    for node in decoded:
        inventory.update_facts(facts_from_node(node))
    return [node.metadata.name for node in decoded]


def _name(pod: Pod) -> str:
    return f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}"
