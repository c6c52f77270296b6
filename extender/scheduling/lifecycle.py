"""The life of a grant outside the scheduling cycle: rebuilt after a restart, re-adopted
from a bound pod, ended with its pod or its node, recorded from a DRA claim.

The ledger is the record and the inventory's reservations follow it: a grant is
ended in the ledger first and freed in the inventory after, so memory still held on
paper is never handed out twice (a failed ledger write leaves the reservation, and the
caller retries).
"""

from __future__ import annotations

from decimal import Decimal

from extender.core.allocation import Allocation, NodeRef, PodRef
from extender.dra.ingest import decisions_from_claim
from extender.ledger.base import Ledger
from extender.scheduling.asks import Asks
from extender.scheduling.bind import Binding, grants_of
from extender.scheduling.evaluate import Evaluator
from extender.scheduling.intake import Intake
from extender.state.inventory import Grant
from extender.wire.annotations import ANN_GPU_MEMORY_MIB, ANN_GPU_UUIDS
from extender.wire.clock import Clock


class Lifecycle:
    def __init__(
        self,
        evaluator: Evaluator,
        ledger: Ledger,
        clock: Clock,
        binding: Binding,
        asks: Asks,
        intake: Intake,
    ) -> None:
        self.evaluator, self.inventory = evaluator, evaluator.inventory
        self.ledger, self.clock = ledger, clock
        self.binding, self.asks, self.intake = binding, asks, intake

    def rebuild(self) -> int:
        """Re-reserve every active ledger allocation (after a restart); returns pods."""
        by_pod: dict[str, list[Allocation]] = {}
        for a in self.ledger.active():
            by_pod.setdefault(a.pod.uid, []).append(a)
        for rows in by_pod.values():
            self.inventory.reserve(grants_of(rows))
        return len(by_pod)

    def readopt(self, uid: str, namespace: str, name: str, node: str, ann: dict[str, str]) -> None:
        """A bound pod holding GPUs the inventory does not know of: after a restart, or
        bound by another replica (HA shares the ledger, not memory). Its ledger rows are
        the grant; without rows (ledger lost), its annotations are."""
        if ANN_GPU_UUIDS not in ann or self.inventory.grants_of(uid):
            return
        rows = [a for a in self.ledger.for_pod(uid) if a.ended_at is None]
        if rows:
            self.inventory.reserve(grants_of(rows))
            return
        try:
            mib = int(ann.get(ANN_GPU_MEMORY_MIB, "0"))
        except ValueError:
            return
        uuids = [u for u in ann[ANN_GPU_UUIDS].split(",") if u]
        self.inventory.reserve([Grant(uid, namespace, name, node, u, mib) for u in uuids])

    def holds(self, uid: str) -> bool:
        """Whether anything of the pod is held: a reservation or a ledger row."""
        return bool(self.inventory.grants_of(uid) or self.ledger.for_pod(uid))

    def release(self, pod_uid: str, reason: str) -> int:
        """The pod ended (or was deleted): end its ledger rows, then free its reservations.
        A bind of the pod still running is waited for (bounded), so it cannot record
        after the end."""
        with self.binding.turn(pod_uid):
            ended = self.ledger.release(pod_uid, self.clock.now(), reason)
            self.inventory.release(pod_uid)
            self.binding.forget(pod_uid)
            self.asks.pods.pop(pod_uid)
        forget = getattr(self.binding.binder, "forget", None)
        if forget is not None:
            forget(pod_uid)
        return ended

    def started(self, pod_uid: str) -> None:
        self.ledger.mark_started(pod_uid, self.clock.now())

    def node_gone(self, node: str, reason: str) -> int:
        """The Node object is gone (consolidation, spot interruption): end its grants."""
        for uid in {g.pod_uid for g in self.inventory.grants_on_node(node)}:
            self.inventory.release(uid)
            self.binding.forget(uid)
        self.inventory.remove_node(node)
        self.intake.forget_node(node)
        now = self.clock.now()
        ended = self.ledger.release_node(node, now, reason)
        self.ledger.node_gone(node, now, reason)
        return ended

    def ingest_claim(self, claim: dict, pods: dict[str, PodRef]) -> int:
        """Record an allocated ResourceClaim's devices for each pod it is reserved for
        (idempotent); returns the pods newly recorded. Raises ClaimIngestError while the
        slices or node are not known yet (the caller retries)."""
        dra = self.evaluator.dra
        if dra is None:
            return 0
        now = self.clock.now()
        decisions = decisions_from_claim(
            claim, dra.all_slices(), pods, self._node_ref, self._gpu_price, now
        )
        recorded = 0
        for d in decisions:
            if self.holds_active(d.pod.uid):
                continue
            self.ledger.record_decision(d)
            self.ledger.mark_bound(d.pod.uid, now)
            ref = d.pod
            self.inventory.reserve(
                [
                    Grant(ref.uid, ref.namespace, ref.name, d.node.name, g.gpu_uuid, g.memory_mib)
                    for g in d.grants
                ]
            )
            recorded += 1
        return recorded

    def holds_active(self, uid: str) -> bool:
        """A reservation, or a ledger row not ended."""
        if self.inventory.grants_of(uid):
            return True
        return any(a.ended_at is None for a in self.ledger.for_pod(uid))

    def _node_ref(self, name: str) -> NodeRef:
        facts = self.inventory.facts(name)
        if facts is None:
            return NodeRef(name)
        return NodeRef(name, facts.instance_type, facts.capacity_type, facts.zone, facts.nodepool)

    def _gpu_price(self, name: str) -> Decimal | None:
        price = self.inventory.price(name)
        return price.per_gpu_hour if price else None
