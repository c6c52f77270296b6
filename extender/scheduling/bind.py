"""bind: decide the pod's GPUs on its node, record the decision, then bind it.

Idempotent by pod UID across retries and concurrent calls: one bind per pod at a time
(``inflight``), and a second call waits for the first and then sees its outcome. The
ledger row and the reservation exist together or not at all: a ledger write whose
answer was lost leaves the reservation held until the pod's next bind asks the ledger
what happened (``settle``). Runs in the bind threads, never on the event loop; the
node is evaluated afresh under the inventory's lock.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from decimal import Decimal
from typing import Any

from extender.core.allocation import (
    Allocation,
    AlreadyAllocated,
    CapacityExceeded,
    Decision,
    GpuGrant,
    LedgerUnavailable,
    NodeRef,
    Sharing,
)
from extender.core.received import pro_rata
from extender.ledger.base import Ledger
from extender.ledger.metrics import SCHEDULING
from extender.ledger.records import AllocationFilter
from extender.pricing import NodePrice
from extender.pricing.mig import mig_share
from extender.scheduling.acks import Acks
from extender.scheduling.asks import Asks
from extender.scheduling.binder import Binder, BindError
from extender.scheduling.config import BIND_WORKERS, ServiceConfig
from extender.scheduling.deadline import Deadline
from extender.scheduling.evaluate import Evaluator
from extender.scheduling.inflight import InFlight
from extender.scoring import place
from extender.scoring.model import GpuView, NodeView
from extender.state.demand import DemandError, GpuDemand
from extender.state.inventory import Grant
from extender.state.podcache import SeenPod
from extender.wire.annotations import ANN_GPU_MEMORY_MIB, ANN_GPU_UUIDS
from extender.wire.clock import Clock
from extender.wire.logs import RateLimitedLog
from extender.wire.protocol import ExtenderBindingArgs, ExtenderBindingResult, Pod

log = logging.getLogger("headroom.service")
# during a database outage every refused bind would log an ERROR: one per 10 s instead
ledger_failed_log = RateLimitedLog(log, every_s=10.0)


class BindRefused(Exception):
    """The node cannot take the pod now; the message says why."""


class Binding:
    """Binds pods, one at a time per pod."""

    def __init__(
        self,
        evaluator: Evaluator,
        asks: Asks,
        ledger: Ledger,
        binder: Binder,
        clock: Clock,
        config: ServiceConfig,
    ) -> None:
        self.evaluator, self.inventory, self.asks = evaluator, evaluator.inventory, asks
        self.ledger, self.binder, self.clock, self.config = ledger, binder, clock, config
        self.acks = Acks(self.inventory, ledger, clock, config.ack_timeout)
        # pods bind was not shown by filter: the watch cache after a restart (kube/sync)
        self.lookup: Callable[[str], Pod | None] = lambda uid: None
        self._binding = InFlight()
        # pods whose reservation is held although the ledger's answer was lost: the next
        # bind of the pod asks the ledger what happened before doing anything else
        # (the call still running when it timed out, if any: settled only once it is done)
        self._unsettled: dict[str, Future[Any] | None] = {}
        self._in_time = Deadline(config.ledger_deadline, workers=BIND_WORKERS).call

    def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        if not self._binding.enter(args.PodUID, self.config.bind_wait):
            return ExtenderBindingResult(
                Error=f"pod {args.PodNamespace}/{args.PodName}: an earlier bind of this pod "
                "is still running; the scheduler will retry"
            )
        try:
            return self._bind(args)
        finally:
            self._binding.leave(args.PodUID)

    @contextlib.contextmanager
    def turn(self, uid: str) -> Iterator[None]:
        """The pod's turn (waited for, bounded): no bind of it runs meanwhile."""
        turn = self._binding.enter(uid, self.config.bind_wait)
        try:
            yield
        finally:
            if turn:
                self._binding.leave(uid)

    def forget(self, uid: str) -> None:
        """The pod's reservation is gone: nothing of it is left to settle."""
        self._unsettled.pop(uid, None)

    def _bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        seen = self.asks.seen(args.PodUID) or self._look_up(args.PodUID)
        if seen is None:
            return ExtenderBindingResult(
                Error=f"pod {args.PodNamespace}/{args.PodName} ({args.PodUID}) was not seen by "
                "filter; the scheduler will retry"
            )
        if seen.demand.count == 0:
            return self._bind_only(args, {})
        if self.evaluator.dra_backed(args.Node, seen.demand):
            # kube-scheduler's PreBind already allocated the pod's claim: the ledger
            # records that claim's devices when it is seen (lifecycle.ingest_claim)
            log.info("bind: nvidia.com/gpu served by DRA", extra={"pod": args.PodUID})
            return self._bind_only(args, {})
        unsettled = self._settle(args.PodUID)
        if unsettled:
            return ExtenderBindingResult(Error=unsettled)
        existing = self.inventory.grants_of(args.PodUID)
        if existing:
            return self._rebind(args, existing)
        try:
            decision, grants = self._decide(seen, args.Node)
        except BindRefused as e:
            return ExtenderBindingResult(Error=str(e))
        result = self._record_and_bind(args, decision, grants)
        if result.Error:
            self.acks.drop(args.PodUID)
        return result

    def _rebind(self, args: ExtenderBindingArgs, existing: list[Grant]) -> ExtenderBindingResult:
        """A retry of a pod that holds its GPUs already (after a restart, or a bind whose
        answer was lost): bound again with them; the row may still say reserved."""
        if existing[0].node != args.Node:
            return ExtenderBindingResult(Error=f"pod already holds GPUs on node {existing[0].node}")
        result = self._bind_only(args, grant_annotations(existing))
        if not result.Error:
            with contextlib.suppress(Exception):  # a closed ledger: the pod's start marks it
                self.ledger.mark_bound_later(args.PodUID, self.clock.now())
        return result

    def _settle(self, uid: str) -> str:
        """For a pod whose last ledger write had no clear answer, ask the ledger: a row
        means the grant stands (the reservation is kept and the bind goes on as a retry);
        none means it never happened (the reservation is freed). "" when settled."""
        if uid not in self._unsettled:
            return ""
        pending = self._unsettled[uid]
        if pending is not None:  # the write itself must finish before the ledger can say
            try:
                pending.result(timeout=self.config.ledger_deadline)
            except FutureTimeout:
                return "ledger unavailable, bind refused: an earlier write still has no answer"
            except Exception:
                pass  # it failed: the ledger says below whether anything was written
        try:
            recorded = any(a.ended_at is None for a in self._in_time(self.ledger.for_pod, uid))
        except Exception as e:
            return f"ledger unavailable, bind refused: {e}"
        if not recorded:
            self.inventory.release(uid)
        self._unsettled.pop(uid, None)
        return ""

    def _look_up(self, uid: str) -> SeenPod | None:
        pod = self.lookup(uid)
        if pod is None:
            return None
        try:
            return self.asks.read(pod)
        except DemandError:
            return None

    def _decide(self, seen: SeenPod, node_name: str) -> tuple[Decision, list[Grant]]:
        """Evaluate the node afresh and reserve, atomically w.r.t. other binds."""
        with self.inventory.lock:
            reason = self.evaluator.unavailable(node_name, self.clock.now())
            view = self.inventory.view(node_name)
            if reason or view is None:
                raise BindRefused(f"node {node_name}: {reason or 'unknown node'}")
            ev = place(view, seen.demand, self.evaluator.policy, self.evaluator.context())
            if not ev.fits:
                raise BindRefused(f"node {node_name}: {ev.reason}")
            decision = self._decision(seen, view, ev.chosen)
            ref = seen.ref
            grants = [
                Grant(ref.uid, ref.namespace, ref.name, node_name, g.gpu_uuid, g.memory_mib)
                for g in decision.grants
            ]
            if not self.inventory.reserve(grants):  # bind holds the pod's turn: cannot be
                raise BindRefused(f"pod {ref.uid} already holds a reservation")
            # the node's device plugin must acknowledge this grant before the next one
            # (unavailable() above refused while another waits); released if bind fails
            plugin_gpus = [] if seen.demand.mig_profile else [g.gpu_uuid for g in grants]
            self.acks.hold(node_name, ref.uid, f"{ref.namespace}/{ref.name}", plugin_gpus)
            d = seen.demand  # its CPU and memory count on the node until it is released
            self.inventory.pod_requests(ref.uid, node_name, d.cpu_milli, d.host_memory_mib)
        return decision, grants

    def _record_and_bind(
        self, args: ExtenderBindingArgs, decision: Decision, grants: list[Grant]
    ) -> ExtenderBindingResult:
        uid = args.PodUID
        try:
            self._in_time(self.ledger.record_decision, decision)
        except AlreadyAllocated as e:  # another replica recorded this pod: ours goes
            self.inventory.release(uid, only=grants)
            return ExtenderBindingResult(Error=str(e))
        except CapacityExceeded as e:  # another replica granted the GPU's memory first
            self.inventory.release(uid, only=grants)  # nothing was written: ours goes
            self._learn(args.Node)
            SCHEDULING.binds.labels("over-capacity").inc()
            log.warning(
                "bind refused: GPU full in the ledger",
                extra={
                    "event": "bind.over_capacity",
                    "pod": uid,
                    "node": args.Node,
                    "gpu_uuid": e.gpu_uuid,
                    "asked_mib": e.asked_mib,
                    "free_mib": e.free_mib,
                },
            )
            return ExtenderBindingResult(Error=f"{e}; the scheduler will retry")
        except Exception as e:
            if isinstance(e, LedgerUnavailable) and not e.maybe_written:
                self.inventory.release(uid, only=grants)  # nothing reached the database
            else:  # it may have committed with its answer lost (or still be running): the
                # memory stays held until the pod's next bind asks the ledger (_settle)
                self._unsettled[uid] = getattr(e, "pending", None)
            ledger_failed_log.error("ledger write failed", extra={"pod": uid, "error": str(e)})
            return ExtenderBindingResult(Error=f"ledger unavailable, bind refused: {e}")
        result = self._bind_only(args, grant_annotations(grants))
        SCHEDULING.binds.labels("failed" if result.Error else "bound").inc()
        self._mark(uid, grants, result.Error)
        return result

    def _learn(self, node: str) -> None:
        """Reserve the node's active ledger rows this replica does not hold (granted by
        another replica), so its next filter and bind see that memory as taken instead
        of offering it again until the pod watch re-adopts those pods. A pod whose row
        ends meanwhile is freed again (its release may have run before our reserve)."""
        try:
            rows = self._in_time(
                self.ledger.list_allocations, AllocationFilter(node=node, active=True), 0, 10_000
            )
            by_pod: dict[str, list[Allocation]] = {}
            for a in rows:
                by_pod.setdefault(a.pod.uid, []).append(a)
            adopted = [
                uid
                for uid, held in by_pod.items()
                if not self.inventory.grants_of(uid) and self.inventory.reserve(grants_of(held))
            ]
            for uid in adopted:
                if all(a.ended_at is not None for a in self._in_time(self.ledger.for_pod, uid)):
                    self.inventory.release(uid)
        except Exception as e:  # best effort: the ledger's check stays the guard
            ledger_failed_log.error("ledger read failed", extra={"node": node, "error": str(e)})

    def _mark(self, uid: str, grants: list[Grant], error: str) -> None:
        """The bind's outcome into the ledger row; a failed bind frees its reservation
        once the row says so (until then its memory stays held: settled later). A
        bound one is not waited for: its row, already durable, bills the same."""
        now = self.clock.now()
        try:
            if error:
                self._in_time(self.ledger.fail_bind, uid, now, error)
                self.inventory.release(uid, only=grants)
            else:
                self.ledger.mark_bound_later(uid, now)
        except Exception as e:
            if error:
                self._unsettled[uid] = getattr(e, "pending", None)
            ledger_failed_log.error(
                "ledger status update failed", extra={"pod": uid, "error": str(e)}
            )

    def _bind_only(
        self, args: ExtenderBindingArgs, annotations: dict[str, str]
    ) -> ExtenderBindingResult:
        try:
            self.binder.bind(args.PodNamespace, args.PodName, args.PodUID, args.Node, annotations)
        except BindError as e:
            return ExtenderBindingResult(Error=str(e))
        except Exception as e:
            log.exception("binder failed")
            return ExtenderBindingResult(Error=f"bind failed: {e}")
        return ExtenderBindingResult()

    def _decision(self, seen: SeenPod, view: NodeView, chosen: tuple[GpuView, ...]) -> Decision:
        facts = self.inventory.facts(view.name)
        price = self.inventory.price(view.name)
        node = NodeRef(
            name=view.name,
            instance_type=view.instance_type,
            capacity_type=view.capacity_type,
            zone=facts.zone if facts else "",
            nodepool=facts.nodepool if facts else "",
        )
        grants = tuple(grant(g, seen.demand, price) for g in chosen)
        return Decision(seen.ref, node, grants, self.clock.now(), self.evaluator.policy.name)


def grant(gpu: GpuView, demand: GpuDemand, price: NodePrice | None) -> GpuGrant:
    """One GPU's share of a decision: the whole GPU (exclusive), a MIG instance (priced
    by its memory slices of the parent GPU), or the memory asked for (priced pro rata of
    the GPU's memory)."""
    if demand.mig_profile:
        sharing, mib = Sharing.MIG, gpu.total_mib
    elif demand.memory_mib is None:
        sharing, mib = Sharing.EXCLUSIVE, gpu.total_mib
    else:
        sharing, mib = Sharing.SHARED, demand.memory_mib
    if price is None:
        cost = None  # unpriced
    elif sharing == Sharing.MIG:  # its memory slices' share of the parent (pricing/mig.py)
        cost = price.per_gpu_hour * mig_share(gpu.mig_profile, gpu.total_mib, gpu.parent_total_mib)
    else:
        cost = pro_rata(price.per_gpu_hour, mib, gpu.total_mib) if gpu.total_mib else Decimal(0)
    return GpuGrant(
        gpu_uuid=gpu.uuid,
        gpu_index=gpu.index,
        model=gpu.model,
        memory_mib=mib,
        gpu_total_mib=gpu.total_mib,
        sharing=sharing,
        price_per_hour=cost,
        mig_profile=demand.mig_profile,
    )


def grants_of(rows: Iterable[Allocation]) -> list[Grant]:
    """The inventory's reservations for ledger rows."""
    return [
        Grant(
            a.pod.uid,
            a.pod.namespace,
            a.pod.name,
            a.node.name,
            a.grant.gpu_uuid,
            a.grant.memory_mib,
        )
        for a in rows
    ]


def grant_annotations(grants: list[Grant]) -> dict[str, str]:
    """The annotations a bound pod carries: its GPUs and the memory of each."""
    return {
        ANN_GPU_UUIDS: ",".join(g.gpu_uuid for g in grants),
        ANN_GPU_MEMORY_MIB: str(grants[0].memory_mib) if grants else "0",
    }
