"""The scheduling service: filter, prioritize, bind, preempt and agent reports.

It ties inventory, policy, ledger and binder together; the HTTP layer decodes a
request, calls one method here and encodes the answer. No HTTP in here, and no
scoring arithmetic either (that lives in extender.scoring).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

import msgspec
import numpy as np

from extender.codec.namebytes import NameIndex
from extender.codec.namejson import scores_json
from extender.codec.namelists import NameList, name_ids, passing_list, same_ids
from extender.codec.nodecache import NodeObjectCache
from extender.core.allocation import (
    AlreadyAllocated,
    Decision,
    GpuGrant,
    LedgerUnavailable,
    NodeRef,
    Observation,
    PodRef,
    Sharing,
)
from extender.dra.feasibility import DeviceKey, claim_fits, current_devices, device_uuid
from extender.dra.ingest import decisions_from_claim
from extender.dra.state import DraState
from extender.ledger.base import Ledger
from extender.ledger.metrics import SCHEDULING
from extender.ledger.writer import LedgerWriter
from extender.pricing import NodePrice
from extender.scheduling.binder import Binder, BindError
from extender.scheduling.deadline import Deadline
from extender.scheduling.discrepancies import Discrepancy, discrepancies, observations
from extender.scheduling.hotshapes import HotShapes
from extender.scheduling.inflight import InFlight
from extender.scheduling.plans import Evaluate, Failure, Outcome, Plan, Plans
from extender.scheduling.reorder import passing_positions, scores_by_id, scores_of
from extender.scheduling.throttle import DiscrepancyThrottle
from extender.scoring import Context, Evaluation, Limits, Policy, Weights, evaluate
from extender.scoring.batch import Ints, unfit
from extender.scoring.framework import (
    as_arrays,
    evaluate_rows,
    priority_array,
)
from extender.scoring.model import GpuView, NodeView
from extender.scoring.narrowing import passing as narrowed
from extender.state.demand import DemandError, GpuDemand, demand_of
from extender.state.inventory import Grant, Inventory
from extender.state.podcache import PodCache, SeenPod
from extender.state.workload import WorkloadMix
from extender.wire.annotations import ANN_GPU_MEMORY_MIB, ANN_GPU_UUIDS
from extender.wire.clock import Clock
from extender.wire.logs import RateLimitedLog
from extender.wire.protocol import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriority,
    MetaPod,
    MetaVictims,
    Pod,
    encoder,
)
from extender.wire.report import NodeReport, ReportResponse

log = logging.getLogger("headroom.service")
# during a database outage every refused bind would log an ERROR: one per 10 s instead
ledger_failed_log = RateLimitedLog(log, every_s=10.0)


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    stale_after: float = 30.0
    limits: Limits = field(default_factory=Limits)
    weights: Weights = field(default_factory=Weights)
    narrow_epsilon: float | None = None  # None: filter passes every fitting node
    refresh_shapes: int = 2  # plans brought up to date after a report or bind (hotshapes)
    refresh_window: float = 10.0  # ... for the shapes filtered within this many seconds
    # a second bind of a pod waits this long for the first (below the scheduler's 5 s
    # extender httpTimeout, so the wait itself is answered before the scheduler gives up)
    bind_wait: float = 4.0
    # the bind path's ledger calls answer within this even if the database is frozen
    ledger_deadline: float = 3.5


def pod_ref(pod: Pod) -> PodRef:
    meta = pod.metadata
    owner = next((o for o in meta.ownerReferences or [] if o.controller), None)
    if owner is None and meta.ownerReferences:
        owner = meta.ownerReferences[0]
    return PodRef(
        uid=meta.uid or f"{meta.namespace}/{meta.name}",
        namespace=meta.namespace or "default",
        name=meta.name,
        owner_kind=owner.kind if owner else "",
        owner_name=owner.name if owner else "",
        labels=dict(meta.labels or {}),
    )


class SchedulingService:
    def __init__(
        self,
        inventory: Inventory,
        ledger: Ledger,
        binder: Binder,
        policy: Policy,
        clock: Clock,
        config: ServiceConfig = ServiceConfig(),
    ) -> None:
        self.inventory = inventory
        self.ledger = ledger
        self.binder = binder
        self.policy = policy
        self.clock = clock
        self.config = config
        self.pods = PodCache()
        self.mix = WorkloadMix()
        self.names = NameIndex()  # node names -> ids, shared with the request decoder
        self.plans = Plans(self.names)
        self.node_objects = NodeObjectCache(self.inventory.update_facts, index=self.names)
        # edges plug in here: Kubernetes Events / metrics for pods that fit nowhere, and a
        # lookup of pods bind was not shown by filter (the watch cache after a restart)
        self.unplaceable_hooks: list[Callable[[PodRef, dict[str, str]], None]] = [
            lambda pod, _: SCHEDULING.no_fit.labels(pod.namespace).inc()
        ]
        self.pod_lookup: Callable[[str], Pod | None] = lambda uid: None
        self.writer = LedgerWriter(ledger)
        self.findings = DiscrepancyThrottle()
        self.dra: DraState | None = None  # set when watching a cluster
        self._recorded_nodes: dict[str, tuple[object, ...]] = {}
        self._last_read: tuple[Pod, PodRef, GpuDemand] | None = None  # see _remember
        self._last_scores: tuple[NameList, Ints, msgspec.Raw] | None = None  # _scores_reply
        self._last_passing: Sequence[str] | None = None  # see _evaluated_outcome
        self.hot = HotShapes(config.refresh_shapes, config.refresh_window)  # see refresh
        self._binding = InFlight()  # one bind per pod at a time (extender/scheduling/inflight.py)
        # pods whose reservation is held although the ledger's answer was lost: the next
        # bind of the pod asks the ledger what happened before doing anything else
        # (the call still running when it timed out, if any: settled only once it is done)
        self._unsettled: dict[str, Future[Any] | None] = {}
        self._in_time = Deadline(config.ledger_deadline).call  # see extender/scheduling/deadline.py

    # --- startup -----------------------------------------------------------------------

    def rebuild(self) -> int:
        """Re-reserve every active ledger allocation (after a restart); returns pods."""
        by_pod: dict[str, list[Grant]] = {}
        for a in self.ledger.active():
            by_pod.setdefault(a.pod.uid, []).append(
                Grant(
                    a.pod.uid,
                    a.pod.namespace,
                    a.pod.name,
                    a.node.name,
                    a.grant.gpu_uuid,
                    a.grant.memory_mib,
                )
            )
        for grants in by_pod.values():
            self.inventory.reserve(grants)
        return len(by_pod)

    # --- filter / prioritize -------------------------------------------------------------

    def filter(self, args: ExtenderArgs) -> tuple[ExtenderFilterResult, list[msgspec.Raw] | None]:
        """Passing set always returned; every failed node gets a reason a person can act on."""
        raws = args.Nodes.items if args.Nodes is not None else None
        if args.Pod is None:
            return ExtenderFilterResult(Error="request has no Pod"), None
        try:
            demand = self._remember(args.Pod)
        except DemandError as e:
            return ExtenderFilterResult(Error=f"pod {_name(args.Pod)}: {e}"), None
        if not demand.wants_gpu:  # near-zero cost path: everything passes, nothing decoded
            if raws is not None:
                return ExtenderFilterResult(), list(raws)
            return ExtenderFilterResult(NodeNames=list(args.NodeNames or [])), None
        names, now = self._names(args), self.clock.now()
        if demand.count:  # device-plugin GPUs: its plans are patched after reports
            self.hot.touch(demand, now)
        found = self._reordered_filter(demand, names, now)
        if found is None:
            plan = self._plan(args.Pod, demand, names, now)
            found = self._filter_answer(plan, demand)
        passing, result = found
        if not len(passing) and names:
            self._unplaceable(args.Pod, result)
        if raws is not None:
            return (
                msgspec.structs.replace(result, NodeNames=None),
                [raws[i] for i in passing.tolist()],
            )
        return result, None

    def refresh(self) -> int:
        """Brings the widest plan of each shape filtered lately up to date and makes its
        filter and prioritize answers (``extender.scheduling.hotshapes``); call it off the
        scheduling cycle, after an agent report or a bind is answered. Returns the plans
        refreshed."""
        now, done = self.clock.now(), 0
        for demand in self.hot.recent(now):
            shape, evaluate = self._shape(demand, now)
            parent = self.plans.parent(
                shape, now, self.inventory.seq, self._changed, evaluate, self.config.stale_after
            )
            if parent is None:  # none, or it must be rebuilt: the next filter does that
                continue
            passing = self._filter_answer(parent, demand)[1].NodeNames
            if isinstance(passing, NameList):  # prioritize gets it back (read by ids)
                self._passing_reply(parent, demand)
            done += 1
        return done

    def _filter_answer(self, plan: Plan, demand: GpuDemand) -> tuple[Ints, ExtenderFilterResult]:
        """The plan's filter reply, kept with it: the same candidates and shape as last time
        give the same reply."""
        outcome = plan.derived.get("filter")
        if outcome is None:
            outcome = plan.derived["filter"] = self._filter_outcome(plan, demand)
        return cast(tuple[Ints, ExtenderFilterResult], outcome)

    def _reordered_filter(
        self, demand: GpuDemand, names: Sequence[str], now: float
    ) -> tuple[Ints, ExtenderFilterResult] | None:
        """The reply for candidates that permute the shape's plan's (``reorder``), read
        from that plan's own reply by the names' ids; None for any other list."""
        parent = self._reorder_source(demand, names, now)
        if parent is None or len(parent.names) != len(names) or parent.names is names:
            return None  # the plan's own list: its kept reply is the answer
        where, ids = parent.where(self.names), name_ids(self.names, names)
        if where is None or ids is None:
            return None
        passed, result = self._filter_answer(parent, demand)
        passing = passing_positions(where, ids, passed, len(parent.names))
        if passing is None:
            return None
        return passing, ExtenderFilterResult(
            NodeNames=passing_list(names, passing),
            FailedNodes=result.FailedNodes,
            FailedAndUnresolvableNodes=result.FailedAndUnresolvableNodes,
        )

    def _reorder_source(self, demand: GpuDemand, names: Sequence[str], now: float) -> Plan | None:
        """The plan a list read by ids may permute answers of (device-plugin asks); None
        when a plan for the very list is kept (its replies are kept with it)."""
        if not isinstance(names, NameList) or names.ids is None or not demand.count:
            return None
        shape, evaluate = self._shape(demand, now)
        if self.plans.kept(names, shape):
            return None
        return self.plans.parent(
            shape, now, self.inventory.seq, self._changed, evaluate, self.config.stale_after
        )

    def _filter_outcome(self, plan: Plan, demand: GpuDemand) -> tuple[Ints, ExtenderFilterResult]:
        """Passing positions (an array: kept with the plan, a list of hundreds of ints
        cost as much to free as to make) and a reason for each node that does not fit.
        A permuted list gets its parent's answer in its own order: narrowing passes every
        node within epsilon of the best, so the answer does not depend on the order."""
        permuted = plan.permutes()
        if permuted is None:
            return self._evaluated_outcome(plan, demand)
        parent, back = permuted
        done = parent.derived.get("filter")
        if done is None:
            done = parent.derived["filter"] = self._evaluated_outcome(parent, demand)
        passed = cast(tuple[Ints, ExtenderFilterResult], done)[0]
        passing = np.sort(back[passed])  # a few: no pass over all
        result = _failed(plan)  # the same reasons, in this list's order
        result.NodeNames = passing_list(plan.names, passing)
        return passing, result

    def _evaluated_outcome(
        self, plan: Plan, demand: GpuDemand
    ) -> tuple[Ints, ExtenderFilterResult]:
        """With narrowing only the nodes the policy and cost put on top pass
        (docs/scheduling.md); the others fit, so they get no failure reason
        (kube-scheduler only shows reasons when nothing passes, and narrowing never
        passes nothing when something fits)."""
        result = _failed(plan)
        eps = self.config.narrow_epsilon
        if eps is not None and demand.count > 0:
            passing = narrowed(plan.raw, plan.fits, plan.price, self.config.weights, eps)
        else:
            passing = np.flatnonzero(plan.fits)
        result.NodeNames = self._last_passing = passing_list(
            plan.names, passing, self._last_passing
        )
        return passing, result

    def _unplaceable(self, pod: Pod, result: ExtenderFilterResult) -> None:
        reasons = {**result.FailedNodes, **result.FailedAndUnresolvableNodes}
        ref = pod_ref(pod)
        for hook in self.unplaceable_hooks:
            try:
                hook(ref, reasons)
            except Exception:
                log.exception("unplaceable hook failed")

    def prioritize(self, args: ExtenderArgs) -> msgspec.Raw:
        """The reply, a ``HostPriority`` list, as JSON. Kept with the plan as one bytes
        object: a repeat costs a lookup, and a dropped plan frees one object, not
        hundreds of structs (cold by then, freeing them cost ~50 µs of a later request)."""
        if args.Pod is None:
            raise ValueError("request has no Pod")
        demand = self._remember(args.Pod)
        names = self._names(args)
        if not demand.wants_gpu:
            return _encoded([HostPriority(Host=n, Score=0) for n in names])
        now = self.clock.now()
        reordered = self._reordered_priorities(demand, names, now)
        if reordered is not None:
            return reordered
        plan = self._plan(args.Pod, demand, names, now)
        reply = plan.derived.get("prioritize")
        if reply is None:
            scores = priority_array(plan.raw, plan.fits, plan.price, self.config.weights)
            reply = plan.derived["prioritize"] = self._scores_reply(names, scores)
        return cast(msgspec.Raw, reply)

    def _scores_reply(self, names: Sequence[str], scores: Ints) -> msgspec.Raw:
        """The ``HostPriority`` list, written from the name index's bytes when the names
        have ids there (no ``str``, no struct per node: ``namejson``). The last one is
        kept: pods of new shapes often pass the same nodes, and integer scores 0..10
        often come out the same too (then a compare instead of ~20 KB written)."""
        if not (
            isinstance(names, NameList)
            and names.ids is not None
            and names.token is self.names.token
        ):
            return _encoded(list(map(HostPriority, names, scores.tolist())))
        last = self._last_scores
        if last is not None and same_ids(last[0], names) and np.array_equal(last[1], scores):
            return last[2]
        reply = msgspec.Raw(scores_json(self.names, names.ids, scores))
        self._last_scores = (names, scores, reply)
        return reply

    def _reordered_priorities(
        self, demand: GpuDemand, names: Sequence[str], now: float
    ) -> msgspec.Raw | None:
        """The reply for candidates that permute the nodes the shape's plan passes (what
        kube-scheduler sends after a reordered filter), each node's score read by its id
        and written with its name's bytes (``reorder``, ``namejson``); None for any
        other list."""
        parent = self._reorder_source(demand, names, now)
        if parent is None:
            return None  # not a list read by ids (_reorder_source)
        if self._passes_as_listed(parent, demand, cast(NameList, names)):
            return self._passing_reply(parent, demand)
        ids = name_ids(self.names, names)
        if ids is None:
            return None
        kept = parent.derived.get("scores by id")
        if kept is None or cast(tuple[object, Ints, int], kept)[0] is not self.names.token:
            kept = parent.derived["scores by id"] = self._passing_scores(parent, demand)
            if kept is None:
                return None
        _, by_id, size = cast(tuple[object, Ints, int], kept)
        found = scores_of(by_id, ids, size) if len(names) == size else None
        return None if found is None else msgspec.Raw(scores_json(self.names, ids, found))

    def _passes_as_listed(self, parent: Plan, demand: GpuDemand, names: NameList) -> bool:
        """Whether ``names`` is the plan's own passing list, in its order: the filter's
        reply echoed. The same ids, though not always the same object: the decoder keeps
        the first list with those bytes, and a pod of a new shape often passes the very
        nodes another did."""
        passing = self._filter_answer(parent, demand)[1].NodeNames
        return isinstance(passing, NameList) and same_ids(names, passing)

    def _passing_reply(self, parent: Plan, demand: GpuDemand) -> msgspec.Raw:
        """prioritize's reply for the plan's passing list, kept with the plan: scored from
        the plan's own arrays, without a plan of its own (a pod of a new shape would
        build one, ~70 µs, to be asked once)."""
        reply = parent.derived.get("prioritize passing")
        if reply is None:
            passed, result = self._filter_answer(parent, demand)
            reply = parent.derived["prioritize passing"] = self._scores_reply(
                cast(NameList, result.NodeNames), self._passed_scores(parent, passed)
            )
        return cast(msgspec.Raw, reply)

    def _passing_scores(self, parent: Plan, demand: GpuDemand) -> tuple[object, Ints, int] | None:
        """The scores of the nodes the plan passes, by id (``reorder.scores_by_id``), under
        the index's token; None if a name has no id."""
        parent_ids = name_ids(self.names, parent.names)
        if parent_ids is None:
            return None
        passed = self._filter_answer(parent, demand)[0]
        scores = self._passed_scores(parent, passed)
        return (
            self.names.token,
            scores_by_id(parent_ids[passed], scores, self.names.count),
            len(passed),
        )

    def _passed_scores(self, parent: Plan, passed: Ints) -> Ints:
        """The integer scores of the plan's nodes at ``passed``, blended among themselves
        (as a plan of just those nodes would score them)."""
        return priority_array(parent.raw, parent.fits, parent.price, self.config.weights, passed)

    def _names(self, args: ExtenderArgs) -> Sequence[str]:
        if args.NodeNames is not None:
            return args.NodeNames
        if args.Nodes is None:
            return []
        return self.node_objects.names(args.Nodes)

    def _remember(self, pod: Pod) -> GpuDemand:
        """The pod's demand; every pod is remembered (bind needs to know it asked for
        nothing, too). prioritize gets the very Pod object filter got (``ArgsDecoder``):
        what was read from it then is not read again."""
        last = self._last_read
        if last is not None and last[0] is pod:
            ref, demand = last[1], last[2]
        else:
            demand, ref = demand_of(pod), pod_ref(pod)
            self._last_read = (pod, ref, demand)
        if self.pods.put(SeenPod(ref, demand, self.clock.now())) and demand.wants_gpu:
            self.mix.observe(demand)
        return demand

    def _context(self) -> Context:
        return Context(limits=self.config.limits, mix=self.mix.mix)

    def _plan(self, pod: Pod, demand: GpuDemand, names: Sequence[str], now: float) -> Plan:
        """Each candidate's evaluation for this pod (device-plugin GPUs or DRA claims),
        and where replies derived from them may be cached (dropped on change)."""
        if demand.count == 0 and demand.dra_claims:
            evals, prices = self._evaluate_all_dra(pod, names, now)
            return Plan.of(names, -1, _outcome(evals, prices), self.config.stale_after)
        shape, evaluate = self._shape(demand, now)
        return self.plans.plan(
            names, shape, now, self.inventory.seq, self._changed, evaluate, self.config.stale_after
        )

    def _shape(self, demand: GpuDemand, now: float) -> tuple[Hashable, Evaluate]:
        """The key plans for this demand are kept under, and how they evaluate nodes."""
        return (
            (demand.key, demand.capacity, self.mix.version),
            lambda subset, rows: self._evaluate_names(subset, rows, demand, now),
        )

    def _changed(self, plan: Plan) -> Ints | None:
        return self.inventory.columns().changed(plan.rows, plan.layout, plan.seq)

    def _evaluate_names(
        self, names: Sequence[str], rows: Ints | None, demand: GpuDemand, now: float
    ) -> Outcome:
        """Every named node at once from the inventory's columns (MIG demands node by
        node); the nodes that do not fit are then asked, one by one, why not. ``rows``:
        the nodes' rows in the columns, when the caller knows them (a plan's)."""
        cols = self.inventory.columns()
        order = None
        if rows is None:
            rows = cols.rows(names)
            order = cols.ascending(rows)
        live, price, received = cols.read(rows, now, self.config.stale_after)
        ctx = self._context()
        failures: dict[int, Failure] = {}
        if demand.mig_profile:
            fits, raw = np.zeros(len(names), dtype=bool), np.zeros(len(names))
            for i in np.flatnonzero(live >= 0).tolist():
                view = self.inventory.view(names[i])
                ev = evaluate(view, demand, self.policy, ctx) if view else Evaluation(False)
                fits[i], raw[i] = ev.fits, ev.raw
                if ev.reason:
                    failures[i] = (ev.reason, ev.unresolvable)
        else:
            fits, raw = evaluate_rows(cols.whole(ctx.limits), live, demand, self.policy, ctx, order)
        for i in unfit(fits).tolist():
            if i not in failures:
                failures[i] = self._failure(names[i], bool(live[i] >= 0), demand, ctx, now)
        return Outcome(fits, raw, price, received, failures, rows, cols.layout)

    def _failure(
        self, name: str, available: bool, demand: GpuDemand, ctx: Context, now: float
    ) -> Failure:
        """Why the node cannot take the pod, in words a person can act on."""
        if available:
            view = self.inventory.view(name)
            ev = evaluate(view, demand, self.policy, ctx) if view else None
            if ev is not None and not ev.fits:
                return ev.reason, ev.unresolvable
            return "node changed during evaluation; retry", False
        return self._unavailable(name, now) or "node changed during evaluation; retry", True

    def _evaluate_all_dra(
        self, pod: Pod, names: Sequence[str], now: float
    ) -> tuple[list[Evaluation], list[float | None]]:
        requests = self.dra.requests_of(pod) if self.dra is not None else None
        claim = None
        if requests is not None and self.dra is not None:  # else: claims not known yet
            claim = (requests, self.dra.classes(), self.dra.allocated())
        evals = [self._evaluate_dra(name, claim, now) for name in names]
        prices = [v.price_per_gib_hour if (v := self.inventory.view(n)) else None for n in names]
        return evals, prices

    def _evaluate_dra(
        self, name: str, claim: tuple[list[dict], dict[str, dict], set] | None, now: float
    ) -> Evaluation:
        """DRA allocates devices itself (first fit, no scoring): we check the claim fits the
        node's ResourceSlices and score the node by the measured headroom of those GPUs."""
        reason = self._unavailable(name, now)
        if reason:
            return Evaluation(False, reason, unresolvable=True)
        view = self.inventory.view(name)
        assert view is not None
        if claim is None or self.dra is None:
            return Evaluation(True, raw=1.0 - view.committed_mib / max(view.total_mib, 1))
        slices = self.dra.slices_on(name)
        fit = claim_fits(claim[0], claim[1], slices, claim[2])
        if not fit.fits:
            return Evaluation(False, f"DRA claim does not fit this node's devices: {fit.reason}")
        devices = dict(current_devices(slices))
        uuids = {device_uuid(devices[DeviceKey(p.driver, p.pool, p.device)]) for p in fit.devices}
        gpus = [g for g in view.gpus if g.uuid in uuids] or list(view.gpus)
        free = sum(max(g.total_mib - g.committed_mib, 0) for g in gpus)
        return Evaluation(True, raw=free / max(sum(g.total_mib for g in gpus), 1))

    def _unavailable(self, name: str, now: float) -> str:
        facts = self.inventory.facts(name)
        if facts is not None and facts.disrupted:
            return "node is being disrupted or deleted (karpenter.sh/disrupted); no new GPU pods"
        if self.inventory.draining(name):
            return "Karpenter is deleting this node's NodeClaim; no new GPU pods"
        received = self.inventory.received_at(name)
        if received is None:
            hint = ""
            if facts is not None and facts.gpu_count_hint:
                hint = (
                    f" (Karpenter catalog: {facts.gpu_count_hint}x{facts.gpu_model_hint or 'GPU'} "
                    f"{facts.gpu_memory_mib_hint} MiB)"
                )
            return f"no report from the headroom agent on this node yet{hint}; headroom unknown"
        age = now - received
        if age > self.config.stale_after:
            return (
                f"headroom agent report is {age:.0f}s old (stale after "
                f"{self.config.stale_after:.0f}s); headroom unknown — is the agent running?"
            )
        return ""

    # --- bind ----------------------------------------------------------------------------

    def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        """Bind a pod: idempotent by UID across retries and concurrent calls. A second call
        for a pod waits for the first and then sees its outcome; the ledger row and the
        reservation exist together or not at all."""
        if not self._binding.enter(args.PodUID, self.config.bind_wait):
            return ExtenderBindingResult(
                Error=f"pod {args.PodNamespace}/{args.PodName}: an earlier bind of this pod "
                "is still running; the scheduler will retry"
            )
        try:
            return self._bind(args)
        finally:
            self._binding.leave(args.PodUID)

    def _bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        seen = self.pods.get(args.PodUID) or self._look_up(args.PodUID)
        if seen is None:
            return ExtenderBindingResult(
                Error=f"pod {args.PodNamespace}/{args.PodName} ({args.PodUID}) was not seen by "
                "filter; the scheduler will retry"
            )
        if seen.demand.count == 0:
            return self._bind_only(args, {})
        unsettled = self._settle(args.PodUID)
        if unsettled:
            return ExtenderBindingResult(Error=unsettled)
        existing = self.inventory.grants_of(args.PodUID)
        if existing:
            if existing[0].node != args.Node:
                return ExtenderBindingResult(
                    Error=f"pod already holds GPUs on node {existing[0].node}"
                )
            result = self._bind_only(args, _annotations(existing))
            if not result.Error:  # a retry after a restart: the row may still say reserved
                with contextlib.suppress(Exception):
                    self._in_time(self.ledger.mark_bound, args.PodUID, self.clock.now())
            return result
        try:
            decision, grants = self._decide(seen, args.Node)
        except _BindRefused as e:
            return ExtenderBindingResult(Error=str(e))
        return self._record_and_bind(args, decision, grants)

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
        pod = self.pod_lookup(uid)
        if pod is None:
            return None
        try:
            self._remember(pod)
        except DemandError:
            return None
        return self.pods.get(uid)

    def _decide(self, seen: SeenPod, node_name: str) -> tuple[Decision, list[Grant]]:
        """Evaluate the node afresh and reserve, atomically w.r.t. other binds."""
        with self.inventory.lock:
            reason = self._unavailable(node_name, self.clock.now())
            view = self.inventory.view(node_name)
            if reason or view is None:
                raise _BindRefused(f"node {node_name}: {reason or 'unknown node'}")
            ev = evaluate(view, seen.demand, self.policy, self._context())
            if not ev.fits:
                raise _BindRefused(f"node {node_name}: {ev.reason}")
            decision = self._decision(seen, view, ev.chosen)
            grants = [
                Grant(
                    seen.ref.uid,
                    seen.ref.namespace,
                    seen.ref.name,
                    node_name,
                    g.gpu_uuid,
                    g.memory_mib,
                )
                for g in decision.grants
            ]
            if not self.inventory.reserve(grants):  # bind holds the pod's turn: cannot be
                raise _BindRefused(f"pod {seen.ref.uid} already holds a reservation")
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
        except Exception as e:
            if isinstance(e, LedgerUnavailable) and not e.maybe_written:
                self.inventory.release(uid, only=grants)  # nothing reached the database
            else:  # it may have committed with its answer lost (or still be running): the
                # memory stays held until the pod's next bind asks the ledger (_settle)
                self._unsettled[uid] = getattr(e, "pending", None)
            ledger_failed_log.error("ledger write failed", extra={"pod": uid, "error": str(e)})
            return ExtenderBindingResult(Error=f"ledger unavailable, bind refused: {e}")
        result = self._bind_only(args, _annotations(grants))
        SCHEDULING.binds.labels("failed" if result.Error else "bound").inc()
        now = self.clock.now()
        try:
            if result.Error:
                self._in_time(self.ledger.fail_bind, uid, now, result.Error)
                self.inventory.release(uid, only=grants)
            else:
                self._in_time(self.ledger.mark_bound, uid, now)
        except Exception as e:
            if result.Error:  # the row may still be active: hold its memory, settle later
                self._unsettled[uid] = getattr(e, "pending", None)
            ledger_failed_log.error(
                "ledger status update failed", extra={"pod": uid, "error": str(e)}
            )
        return result

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
        grants = tuple(_grant(g, seen.demand, price) for g in chosen)
        return Decision(seen.ref, node, grants, self.clock.now(), self.policy.name)

    # --- lifecycle -----------------------------------------------------------------------

    def release(self, pod_uid: str, reason: str) -> int:
        """The pod ended (or was deleted): end its ledger rows, then free its reservations.

        In that order: if the ledger cannot be written the reservation stays, so memory
        still held on paper is never handed out twice; the caller retries. A bind of the
        pod still running is waited for (bounded), so it cannot record after the end."""
        turn = self._binding.enter(pod_uid, self.config.bind_wait)
        try:
            ended = self.ledger.release(pod_uid, self.clock.now(), reason)
            self.inventory.release(pod_uid)
            self._unsettled.pop(pod_uid, None)
            self.pods.pop(pod_uid)
        finally:
            if turn:
                self._binding.leave(pod_uid)
        forget = getattr(self.binder, "forget", None)
        if forget is not None:
            forget(pod_uid)
        return ended

    def started(self, pod_uid: str) -> None:
        self.ledger.mark_started(pod_uid, self.clock.now())

    def node_gone(self, node: str, reason: str) -> int:
        """The Node object is gone (consolidation, spot interruption): end its grants."""
        for uid in {g.pod_uid for g in self.inventory.grants_on_node(node)}:
            self.inventory.release(uid)
            self._unsettled.pop(uid, None)
        self.inventory.remove_node(node)
        self._recorded_nodes.pop(node, None)
        now = self.clock.now()
        ended = self.ledger.release_node(node, now, reason)
        self.ledger.node_gone(node, now, reason)
        return ended

    def ingest_claim(self, claim: dict, pods: dict[str, PodRef]) -> int:
        """Record an allocated ResourceClaim's devices for each pod it is reserved for
        (idempotent); returns the pods newly recorded. Raises ClaimIngestError while the
        slices or node are not known yet (the caller retries)."""
        if self.dra is None:
            return 0
        now = self.clock.now()
        decisions = decisions_from_claim(
            claim, self.dra.all_slices(), pods, self._node_ref, self._gpu_price, now
        )
        recorded = 0
        for d in decisions:
            if self.inventory.grants_of(d.pod.uid) or any(
                a.ended_at is None for a in self.ledger.for_pod(d.pod.uid)
            ):
                continue
            self.ledger.record_decision(d)
            self.ledger.mark_bound(d.pod.uid, now)
            self.inventory.reserve(
                [
                    Grant(
                        d.pod.uid,
                        d.pod.namespace,
                        d.pod.name,
                        d.node.name,
                        g.gpu_uuid,
                        g.memory_mib,
                    )
                    for g in d.grants
                ]
            )
            recorded += 1
        return recorded

    def _node_ref(self, name: str) -> NodeRef:
        facts = self.inventory.facts(name)
        if facts is None:
            return NodeRef(name)
        return NodeRef(name, facts.instance_type, facts.capacity_type, facts.zone, facts.nodepool)

    def _gpu_price(self, name: str) -> Decimal | None:
        price = self.inventory.price(name)
        return price.per_gpu_hour if price else None

    # --- preempt -------------------------------------------------------------------------

    def preempt(self, args: ExtenderPreemptionArgs) -> ExtenderPreemptionResult:
        """Keep only the candidate nodes where evicting the victims frees enough GPU."""
        if args.Pod is None:
            raise ValueError("request has no Pod")
        demand = self._remember(args.Pod)
        victims = _meta_victims(args)
        if not demand.wants_gpu or demand.count == 0:
            return ExtenderPreemptionResult(NodeNameToMetaVictims=victims)
        kept: dict[str, MetaVictims] = {}
        for node, v in victims.items():
            view = self._view_without(node, [p.UID for p in v.Pods])
            if view is not None and evaluate(view, demand, self.policy, self._context()).fits:
                kept[node] = v
        return ExtenderPreemptionResult(NodeNameToMetaVictims=kept)

    def _view_without(self, node: str, victim_uids: Iterable[str]) -> NodeView | None:
        if self._unavailable(node, self.clock.now()):
            return None
        view = self.inventory.view(node)
        if view is None:
            return None
        freed: dict[str, int] = {}
        for uid in victim_uids:
            for g in self.inventory.grants_of(uid):
                freed[g.gpu_uuid] = freed.get(g.gpu_uuid, 0) + g.memory_mib
        gpus = tuple(
            GpuView(
                g.uuid,
                g.index,
                g.model,
                g.total_mib,
                max(0, g.committed_mib - freed.get(g.uuid, 0)),
                max(0, g.reserved_mib - freed.get(g.uuid, 0)),
                g.mig_profile,
            )
            for g in view.gpus
        )
        return NodeView(
            view.name,
            gpus,
            view.capacity_type,
            view.instance_type,
            view.price_per_gib_hour,
            version=-1,
        )

    # --- agent reports -------------------------------------------------------------------

    def report(self, report: NodeReport) -> ReportResponse:
        now = self.clock.now()
        self.inventory.apply_report(report, now, self.config.stale_after)
        grants = self.inventory.grants_on_node(report.node)
        # usage is folded into the rows of granted (pod, GPU) pairs only: anything else
        # is a leak, found below, and a write for it would change nothing
        granted = {(g.pod_uid, g.gpu_uuid) for g in grants}
        obs = [o for o in observations(report) if (o.pod_uid, o.gpu_uuid) in granted]
        found = self.findings.due(discrepancies(report, grants), now)
        node_record = self._node_record(report.node)
        if obs or found or node_record is not None:
            self.writer.submit(lambda ledger: _write_report(ledger, now, obs, found, node_record))
        return ReportResponse(
            accepted=True,
            node=report.node,
            received_at=now,
            grants=self.inventory.grants_on(report.node),
            stale_after_s=self.config.stale_after,
        )

    def _node_record(self, name: str) -> tuple[NodeRef, list[tuple[str, str, int]], Decimal] | None:
        """What the ledger must know to price the node's idle time, when it changed."""
        view, facts, price = self.inventory.view(name), self.inventory.facts(name), None
        if view is None or facts is None:
            return None
        price = self.inventory.price(name)
        gpus = sorted({(g.uuid, g.model, g.total_mib) for g in view.gpus if not g.mig_profile})
        per_gpu = price.per_gpu_hour if price else Decimal(0)
        # plain values only: kept per node, a signature holding objects would be walked
        # by every full garbage collection (5,000 of them, ~1/3 of its work)
        signature = (
            facts.instance_type,
            facts.capacity_type,
            facts.zone,
            facts.nodepool,
            tuple(gpus),
            per_gpu,
        )
        if self._recorded_nodes.get(name) == signature:
            return None
        self._recorded_nodes[name] = signature
        node = NodeRef(name, facts.instance_type, facts.capacity_type, facts.zone, facts.nodepool)
        return node, list(gpus), per_gpu


class _BindRefused(Exception):
    pass


def _write_report(
    ledger: Ledger,
    at: float,
    obs: list[Observation],
    found: list[Discrepancy],
    node_record: tuple[NodeRef, list[tuple[str, str, int]], Decimal] | None,
) -> None:
    if node_record is not None:
        ledger.record_node(*node_record, at)
    if obs:
        ledger.observe(obs, at)
    for d in found:
        ledger.record_discrepancy(d.kind, d.node, d.gpu_uuid, d.pod_uid, d.amount_mib, d.detail, at)


def _grant(gpu: GpuView, demand: GpuDemand, price: NodePrice | None) -> GpuGrant:
    if demand.mig_profile:
        sharing, mib = Sharing.MIG, gpu.total_mib
    elif demand.memory_mib is None:
        sharing, mib = Sharing.EXCLUSIVE, gpu.total_mib
    else:
        sharing, mib = Sharing.SHARED, demand.memory_mib
    per_gpu = price.per_gpu_hour if price else Decimal(0)
    return GpuGrant(
        gpu_uuid=gpu.uuid,
        gpu_index=gpu.index,
        model=gpu.model,
        memory_mib=mib,
        gpu_total_mib=gpu.total_mib,
        sharing=sharing,
        price_per_hour=per_gpu * mib / gpu.total_mib if gpu.total_mib else Decimal(0),
        mig_profile=demand.mig_profile,
    )


def _encoded(scores: list[HostPriority]) -> msgspec.Raw:
    return msgspec.Raw(encoder.encode(scores))


def _failed(plan: Plan) -> ExtenderFilterResult:
    """A filter result with every failed candidate's reason, in the candidates' order."""
    result = ExtenderFilterResult()
    for i in sorted(plan.failures):
        reason, unresolvable = plan.failures[i]
        failed = result.FailedAndUnresolvableNodes if unresolvable else result.FailedNodes
        failed[plan.names[i]] = reason
    return result


def _outcome(evals: list[Evaluation], prices: list[float | None]) -> Outcome:
    raw, fits, price = as_arrays(evals, prices)
    failures = {i: (e.reason, e.unresolvable) for i, e in enumerate(evals) if not e.fits}
    return Outcome(
        fits,
        raw,
        price,
        np.zeros(len(evals)),
        failures,
        np.full(len(evals), -1, dtype=np.int64),
        -1,
    )  # rows unknown: never patched


def _annotations(grants: list[Grant]) -> dict[str, str]:
    return {
        ANN_GPU_UUIDS: ",".join(g.gpu_uuid for g in grants),
        ANN_GPU_MEMORY_MIB: str(grants[0].memory_mib) if grants else "0",
    }


def _meta_victims(args: ExtenderPreemptionArgs) -> dict[str, MetaVictims]:
    if args.NodeNameToMetaVictims is not None:
        return dict(args.NodeNameToMetaVictims)
    return {
        node: MetaVictims(
            Pods=[MetaPod(UID=p.metadata.uid) for p in v.Pods], NumPDBViolations=v.NumPDBViolations
        )
        for node, v in (args.NodeNameToVictims or {}).items()
    }


def _name(pod: Pod) -> str:
    return f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}"
