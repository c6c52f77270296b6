"""The scheduling service: one facade over filter, prioritize, bind, preempt, agent
reports and the grants' lifecycle. The HTTP edge and ``kube/`` call its methods; each
idea lives in a module of its own: ``cycle`` (filter and prioritize from plans and their
``replies``; ``announced``: plans made ahead), ``evaluate`` (fits, scores and reasons),
``bind``, ``preempt``, ``intake`` (agent reports) and ``lifecycle`` (restart, release,
node gone, DRA claims). No HTTP and no scoring arithmetic here.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from extender.core.allocation import Allocation, PodRef
from extender.dra.state import DraState
from extender.ledger.base import Ledger
from extender.scheduling import preempt
from extender.scheduling.acks import Awaited, ack_seen
from extender.scheduling.announced import Post
from extender.scheduling.asks import Asks
from extender.scheduling.bind import Binding
from extender.scheduling.binder import Binder
from extender.scheduling.config import ServiceConfig
from extender.scheduling.cycle import Cycle, Unplaceable
from extender.scheduling.evaluate import Evaluator
from extender.scheduling.intake import Intake
from extender.scheduling.lifecycle import Lifecycle
from extender.scoring import Policy
from extender.state.inventory import Inventory
from extender.state.nodefacts import NodeFacts
from extender.state.snapshot import NodeRow, snapshot
from extender.state.workload import WorkloadMix
from extender.wire.clock import Clock
from extender.wire.names import Priorities
from extender.wire.protocol import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    Pod,
)
from extender.wire.report import NodeReport, ReportResponse

__all__ = ["SchedulingService", "ServiceConfig"]


class SchedulingService:
    def __init__(
        self,
        inventory: Inventory,
        ledger: Ledger,
        binder: Binder,
        policy: Policy,
        clock: Clock,
        config: ServiceConfig | None = None,
    ) -> None:
        config = config if config is not None else ServiceConfig()
        self.inventory, self.ledger, self.binder = inventory, ledger, binder
        self.policy, self.clock, self.config = policy, clock, config
        self.asks = Asks(clock)
        self.evaluator = Evaluator(
            inventory, policy, self.asks.mix, config.limits, config.stale_after
        )
        self.cycle = Cycle(inventory, self.asks, self.evaluator, clock, config)
        self.binding = Binding(self.evaluator, self.asks, ledger, binder, clock, config)
        self.intake = Intake(inventory, ledger, clock, config.stale_after)
        self.lifecycle = Lifecycle(
            self.evaluator, ledger, clock, self.binding, self.asks, self.intake
        )
        self.writer = self.intake.writer  # the ledger writer's thread (reports' writes)

    @property
    def mix(self) -> WorkloadMix:
        """The workload mix the pods seen lately make (fragmentation is measured by it)."""
        return self.asks.mix

    @property
    def unplaceable_hooks(self) -> list[Unplaceable]:
        """Called for a pod that fits nowhere (Kubernetes Events, metrics)."""
        return self.cycle.unplaceable_hooks

    def quiet(self) -> None:
        """No Event or metric from this service (the warm-up's scratch copy)."""
        self.cycle.unplaceable_hooks.clear()
        self.cycle.pass_hooks.clear()

    # --- the scheduler's verbs (the HTTP edge) -------------------------------------------

    def filter(self, args: ExtenderArgs) -> tuple[ExtenderFilterResult, list[msgspec.Raw] | None]:
        """The filter reply, and in Nodes mode the passing Node objects as raw items."""
        return self.cycle.filter(args)

    def prioritize(self, args: ExtenderArgs) -> Priorities:
        return self.cycle.prioritize(args)

    def serve_on(self, post: Post) -> None:
        """Announced pods' plans are made by ``post`` (the filters' loop's)."""
        self.cycle.announced.serve_on(post)

    def refresh(self) -> int:
        """After a report or bind is answered: recent shapes' plans brought up to date."""
        return self.cycle.refresh()

    def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        return self.binding.bind(args)

    def preempt(self, args: ExtenderPreemptionArgs) -> ExtenderPreemptionResult:
        return preempt.preempt(args, self.asks, self.evaluator, self.clock)

    def report(self, report: NodeReport) -> ReportResponse:
        return self.intake.report(report)

    def nodes(self) -> list[NodeRow]:
        """Per node and GPU: measured, granted, headroom, report age, price (read-only)."""
        return snapshot(self.inventory, self.clock.now())

    # --- the grants' lifecycle (start-up, kube/, standalone release) ----------------------

    def rebuild(self) -> int:
        """Re-reserve every active ledger allocation (after a restart); returns pods."""
        return self.lifecycle.rebuild()

    def release(self, pod_uid: str, reason: str) -> int:
        """The pod ended: its ledger rows ended, its reservations and node's wait freed."""
        self.binding.acks.drop(pod_uid)
        return self.lifecycle.release(pod_uid, reason)

    def started(self, pod_uid: str) -> None:
        self.lifecycle.started(pod_uid)

    def node_gone(self, node: str, reason: str) -> int:
        self.binding.acks.node_gone(node)
        return self.lifecycle.node_gone(node, reason)

    def ingest_claim(self, claim: dict, pods: dict[str, PodRef]) -> int:
        return self.lifecycle.ingest_claim(claim, pods)

    # --- what kube/ tells the service about the cluster ----------------------------------

    def watch_cluster(self, dra: DraState, lookup: Callable[[str], Pod | None]) -> None:
        """A cluster is watched: its DRA state, and its pods for binds filter did not see."""
        self.evaluator.dra = dra
        self.binding.lookup = lookup
        self.binding.acks.enabled = True  # the pod watch shows the plugin's acknowledgements

    def announce(self, pod: Pod) -> bool:
        """From the pod watch: ``pod`` is pending; its plan is made ahead (``announced``)."""
        return self.cycle.announced.put(pod)

    def pod_on_node(self, uid: str, node: str, cpu_milli: int, memory_mib: int) -> None:
        """A pod (any scheduler's) is on ``node`` requesting this CPU and memory."""
        self.inventory.pod_requests(uid, node, cpu_milli, memory_mib)

    def pod_gone(self, uid: str) -> None:
        """The pod ended: its CPU and memory are free again."""
        self.inventory.pod_gone(uid)

    def pods_listed(self, live: set[str]) -> None:
        """A fresh pod list: requests of pods not in it (ended unseen) are dropped."""
        self.inventory.pods_listed(live)

    def node_changed(self, facts: NodeFacts) -> None:
        """A Node object's facts (labels, taints, deletion)."""
        self.inventory.update_facts(facts)

    def name_known(self, node: str, token: object, wire_id: int) -> None:
        """The edge's decoder reads ``node`` as ``wire_id`` in lists carrying ``token``."""
        self.inventory.name_known(node, token, wire_id)

    def node_draining(self, node: str, draining: bool) -> None:
        """Karpenter is (or no longer is) deleting the node's NodeClaim."""
        self.inventory.set_draining(node, draining)

    def allocations(self) -> list[Allocation]:
        """The ledger's active allocations."""
        return list(self.ledger.active())

    def holds(self, pod_uid: str) -> bool:
        """Whether the pod holds anything: a reservation or a ledger row."""
        return self.lifecycle.holds(pod_uid)

    def acknowledgement(self, pod: Pod, node: str) -> None:
        """A bound pod as the watch sees it: its plugin's acknowledgement or not (``acks``)."""
        ack_seen(self.binding.acks, pod, node)

    def expire_acks(self) -> list[Awaited]:
        """Waits for an acknowledgement past the timeout end (each a discrepancy)."""
        return self.binding.acks.expire()

    def awaits(self) -> dict[str, str]:
        """Each node whose grant waits for its device plugin: the pod ("ns/name") awaited."""
        return {a.node: a.pod for a in self.binding.acks.awaited()}

    def readopt(self, uid: str, namespace: str, name: str, node: str, ann: dict[str, str]) -> None:
        """A bound pod whose GPUs the inventory does not hold: reserved again."""
        self.lifecycle.readopt(uid, namespace, name, node, ann)
