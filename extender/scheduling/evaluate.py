"""Whether, and how well, each candidate node can take a pod, and why not when it cannot.

Device-plugin asks are evaluated for every named node at once from the inventory's
columns (MIG asks node by node); the nodes that do not fit are then asked one by one
why not, in words a person can act on. DRA claims are checked against the node's
ResourceSlices (the scheduler's DRA plugin allocates the devices itself, first fit);
the node is scored by the measured headroom of the GPUs the claim would get.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from extender.dra.feasibility import (
    DeviceKey,
    Picked,
    claim_fits,
    current_devices,
    device_uuid,
)
from extender.dra.kquantity import mib_ceil
from extender.dra.state import DraState
from extender.scheduling.acks import waiting_reason
from extender.scheduling.plans import Failure, Outcome
from extender.scoring import Context, Evaluation, Limits, Policy, evaluate
from extender.scoring.batch import Floats, Ints, unfit
from extender.scoring.framework import as_arrays, evaluate_rows
from extender.scoring.model import NodeView
from extender.scoring.policy import HostScorer
from extender.state.demand import GPU_RESOURCE, GpuDemand
from extender.state.inventory import Inventory
from extender.state.workload import WorkloadMix
from extender.wire.protocol import Pod

RETRY = "node changed during evaluation; retry"
# a claim's requests, the device classes, the devices already allocated and what is
# consumed of shareable ones (DraState)
Claim = tuple[list[dict], dict[str, dict], set, dict]


@dataclass
class Evaluator:
    """Evaluates candidates for a demand against the inventory, with the policy."""

    inventory: Inventory
    policy: Policy
    mix: WorkloadMix
    limits: Limits
    stale_after: float
    dra: DraState | None = None  # set when watching a cluster

    def context(self) -> Context:
        return Context(limits=self.limits, mix=self.mix.mix)

    def names(
        self, names: Sequence[str], rows: Ints | None, demand: GpuDemand, now: float
    ) -> Outcome:
        """Every named node at once; ``rows``: the nodes' rows in the columns, when the
        caller knows them (a plan's)."""
        cols = self.inventory.columns()
        order = None
        if rows is None:
            rows = cols.rows(names)
            order = cols.ascending(rows)
        live, price, received = cols.read(rows, now, self.stale_after)
        ctx = self.context()
        failures: dict[int, Failure] = {}
        if demand.mig_profile:
            fits, raw = self._one_by_one(names, live, demand, ctx, failures)
        else:
            fits, raw = evaluate_rows(cols.whole(ctx.limits), live, demand, self.policy, ctx, order)
        for i in unfit(fits).tolist():
            if i not in failures:
                failures[i] = self.failure(names[i], bool(live[i] >= 0), demand, ctx, now)
        return Outcome(fits, raw, price, received, failures, rows, cols.layout)

    def host_only(self, names: Sequence[str], demand: GpuDemand, now: float) -> Floats | None:
        """Each named node's raw score for a pod that asks no GPU, when the policy scores
        such pods (``HostScorer``; None when it does not): nodes without a fresh report
        score 0 (``extender.scoring.hostonly``)."""
        if not isinstance(self.policy, HostScorer):
            return None
        cols = self.inventory.columns()
        live = cols.read(cols.rows(names), now, self.stale_after)[0]
        ctx = self.context()
        return self.policy.score_host_rows(cols.whole(ctx.limits), live, demand, ctx)

    def _one_by_one(
        self,
        names: Sequence[str],
        live: Ints,
        demand: GpuDemand,
        ctx: Context,
        failures: dict[int, Failure],
    ) -> tuple[np.ndarray, np.ndarray]:
        """MIG asks: each available node's view evaluated by itself (a slice profile is
        not a column)."""
        fits, raw = np.zeros(len(names), dtype=bool), np.zeros(len(names))
        for i in np.flatnonzero(live >= 0).tolist():
            view = self.inventory.view(names[i])
            ev = evaluate(view, demand, self.policy, ctx) if view else Evaluation(False)
            fits[i], raw[i] = ev.fits, ev.raw
            if ev.reason:
                failures[i] = (ev.reason, ev.unresolvable)
        return fits, raw

    def failure(
        self, name: str, available: bool, demand: GpuDemand, ctx: Context, now: float
    ) -> Failure:
        """Why the node cannot take the pod, in words a person can act on."""
        if available:
            view = self.inventory.view(name)
            ev = evaluate(view, demand, self.policy, ctx) if view else None
            if ev is not None and not ev.fits:
                return ev.reason, ev.unresolvable
            return RETRY, False
        return self.unavailable(name, now) or RETRY, True

    def unavailable(self, name: str, now: float, plugin: bool = True) -> str:
        """Why no new GPU pod may go to the node now ("" when it may). ``plugin``: the pod
        asks for device-plugin GPUs, so a grant the node's plugin has not acknowledged
        yet holds it back (``acks``); DRA pods are not served by the plugin."""
        facts = self.inventory.facts(name)
        if facts is not None and facts.disrupted:
            return "node is being disrupted or deleted (karpenter.sh/disrupted); no new GPU pods"
        if self.inventory.draining(name):
            return "Karpenter is deleting this node's NodeClaim; no new GPU pods"
        if plugin and (awaiting := self.inventory.awaiting(name)) is not None:
            return waiting_reason(*awaiting, now)
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
        if age > self.stale_after:
            return (
                f"headroom agent report is {age:.0f}s old (stale after "
                f"{self.stale_after:.0f}s); headroom unknown — is the agent running?"
            )
        return ""

    # --- DRA -----------------------------------------------------------------------------

    def dra_backed(self, node: str, demand: GpuDemand) -> bool:
        """kube-scheduler serves the pod's ``nvidia.com/gpu`` on this node through DRA
        (KEP-5004, GA in 1.37): a DeviceClass names it as its ``extendedResourceName`` and
        the node's allocatable does not list it (the scheduler's own rule). The
        scheduler-made claim then says which device the pod got; bind must not pick one."""
        if not demand.count or demand.mig_profile or self.dra is None:
            return False
        facts = self.inventory.facts(node)
        if facts is None or facts.gpu_allocatable is None or facts.gpu_allocatable > 0:
            return False
        return self.dra.extended_class(GPU_RESOURCE) is not None

    def dra_names(self, pod: Pod, names: Sequence[str], now: float) -> Outcome:
        """Every named node for a pod whose GPUs come from ResourceClaims (node by node:
        a claim is matched against each node's slices). Rows unknown: never patched."""
        requests = self.dra.requests_of(pod) if self.dra is not None else None
        claim = None
        if requests is not None and self.dra is not None:  # else: claims not known yet
            claim = (requests, self.dra.classes(), self.dra.allocated(), self.dra.consumed())
        evals = [self._dra_one(name, claim, now) for name in names]
        prices = [v.price_per_gib_hour if (v := self.inventory.view(n)) else None for n in names]
        raw, fits, price = as_arrays(evals, prices)
        failures = {i: (e.reason, e.unresolvable) for i, e in enumerate(evals) if not e.fits}
        n = len(evals)
        return Outcome(fits, raw, price, np.zeros(n), failures, np.full(n, -1, dtype=np.int64), -1)

    def _dra_one(self, name: str, claim: Claim | None, now: float) -> Evaluation:
        """The claim fits the node's ResourceSlices, scored by the measured headroom of
        the GPUs it would get (all of the node's until the claim is known)."""
        reason = self.unavailable(name, now, plugin=False)
        if reason:
            return Evaluation(False, reason, unresolvable=True)
        view = self.inventory.view(name)
        assert view is not None
        if claim is None or self.dra is None:
            return Evaluation(True, raw=1.0 - view.committed_mib / max(view.total_mib, 1))
        slices = self.dra.slices_on(name)
        consumed = {DeviceKey(*k): v for k, v in claim[3].items()}
        fit = claim_fits(claim[0], claim[1], slices, claim[2], consumed)
        if not fit.fits:
            return Evaluation(False, f"DRA claim does not fit this node's devices: {fit.reason}")
        devices = dict(current_devices(slices))
        picked = [
            (p, device_uuid(devices[DeviceKey(p.driver, p.pool, p.device)])) for p in fit.devices
        ]
        short = self._share_short(view, picked)
        if short:
            return Evaluation(False, short)
        uuids = {uuid for _, uuid in picked}
        gpus = [g for g in view.gpus if g.uuid in uuids] or list(view.gpus)
        free = sum(max(g.total_mib - g.committed_mib, 0) for g in gpus)
        return Evaluation(True, raw=free / max(sum(g.total_mib for g in gpus), 1))

    def _share_short(self, view: NodeView, picked: list[tuple[Picked, str | None]]) -> str:
        """A share of a shareable GPU needs measured headroom too: DRA counts only what
        claims consume on paper, and nothing caps a share's memory at run time, so memory
        in use beyond the shares (an overrunning tenant, a process without a claim) is
        seen only here. "" when every share fits the GPU's measured headroom."""
        by_uuid = {g.uuid: g for g in view.gpus}
        margin = self.limits.margin_mib
        for p, uuid in picked:
            gpu = by_uuid.get(uuid or "")
            if p.consumed is None or gpu is None or "memory" not in p.consumed:
                continue
            asked = mib_ceil(p.consumed["memory"])
            if asked > gpu.free_mib(margin):
                return (
                    f"DRA share of GPU {uuid} ({p.device}): {asked} MiB asked, measured headroom "
                    f"{max(gpu.free_mib(margin), 0)} MiB (total {gpu.total_mib}, committed "
                    f"{gpu.committed_mib}, margin {margin})"
                )
        return ""
