"""Agent reports: a node's measured GPU memory into the inventory, usage and findings
into the ledger.

The inventory is updated before the reply (the next filter must see the numbers); the
ledger writes go to the writer's thread (``LedgerWriter``), so a slow database never
holds up an agent. Usage is folded into the rows of granted (pod, GPU) pairs only:
anything else is a leak, found by ``discrepancies`` and recorded at most once per
throttle window. What kubelet says each granted pod holds (``received``) goes to the
ledger as receipts when it changes, and where it is not the grant, as ``mismatch``
findings through the same throttle.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from decimal import Decimal

from extender.core.allocation import NodeRef, Observation
from extender.core.received import Held
from extender.ledger.base import Ledger
from extender.ledger.writer import LedgerWriter
from extender.scheduling.discrepancies import Discrepancy, discrepancies, observations
from extender.scheduling.received import held, mismatches, received_gpus
from extender.scheduling.throttle import DiscrepancyThrottle
from extender.state.inventory import Inventory
from extender.state.measured import MeasuredGpu
from extender.wire.clock import Clock
from extender.wire.report import NodeReport, ReportResponse

log = logging.getLogger("headroom.service")

NodeRecord = tuple[NodeRef, list[tuple[str, str, int]], Decimal | None]


class Intake:
    """Takes agent reports in; remembers what the ledger knows of each node."""

    def __init__(
        self, inventory: Inventory, ledger: Ledger, clock: Clock, stale_after: float
    ) -> None:
        self.inventory, self.clock, self.stale_after = inventory, clock, stale_after
        self.writer = LedgerWriter(ledger)
        self.findings = DiscrepancyThrottle()
        self._recorded_nodes: dict[str, tuple[object, ...]] = {}
        # node -> pod UID -> the holding last sent to the ledger
        self._settled: dict[str, dict[str, Held]] = {}

    def report(self, report: NodeReport) -> ReportResponse:
        now = self.clock.now()
        self.inventory.apply_report(report, now, self.stale_after)
        grants = self.inventory.grants_on_node(report.node)
        granted = {(g.pod_uid, g.gpu_uuid) for g in grants}
        obs = [o for o in observations(report) if (o.pod_uid, o.gpu_uuid) in granted]
        holding = held(report, grants)
        findings = discrepancies(report, grants, received_gpus(holding))
        found = self.findings.due(findings + mismatches(holding, grants), now)
        settle = self._unsettled(report.node, holding)
        node_record = self._node_record(report.node)
        if obs or found or settle or node_record is not None:
            self.writer.submit(lambda ledger: _write(ledger, now, obs, found, node_record, settle))
        return ReportResponse(
            accepted=True,
            node=report.node,
            received_at=now,
            grants=self.inventory.grants_on(report.node),
            stale_after_s=self.stale_after,
        )

    def _unsettled(self, node: str, holding: list[Held]) -> list[Held]:
        """The node's holdings that changed since last sent (a pod's receipt is written
        when it changes, not per report); a pod the node no longer lists is forgotten."""
        before = self._settled.get(node, {})
        self._settled[node] = {h.pod_uid: h for h in holding}
        return [h for h in holding if before.get(h.pod_uid) != h]

    def forget_node(self, name: str) -> None:
        """The node is gone: a node of that name coming back is recorded afresh."""
        self._recorded_nodes.pop(name, None)
        self._settled.pop(name, None)

    def _node_record(self, name: str) -> NodeRecord | None:
        """What the ledger must know to price the node's idle time, when it changed."""
        view, facts = self.inventory.view(name), self.inventory.facts(name)
        if view is None or facts is None:
            return None
        price = self.inventory.price(name)
        gpus = physical_gpus(self.inventory.measured(name))
        per_gpu = price.per_gpu_hour if price else None  # unpriced, never $0
        # plain values only: kept per node, a signature holding objects would be walked
        # by every full garbage collection
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
        if per_gpu is None:  # once per node (and again only if what it is changes)
            log.warning(
                "node has no GPU price: its grants are billed as unpriced",
                extra={
                    "fields": {
                        "node": name,
                        "instance_type": facts.instance_type,
                        "capacity_type": facts.capacity_type,
                        "gpu_model": gpus[0][1] if gpus else "",
                        "fix": "add the instance type or the GPU model to --price-file",
                    }
                },
            )
        node = NodeRef(name, facts.instance_type, facts.capacity_type, facts.zone, facts.nodepool)
        return node, list(gpus), per_gpu


def physical_gpus(units: Iterable[MeasuredGpu]) -> list[tuple[str, str, int]]:
    """The node's physical GPUs as the bill counts them: (uuid, model, MiB), a MIG GPU
    once, by its parent's uuid and memory (its instances are shares of it), sorted."""
    return sorted(
        {
            (g.parent_uuid, g.model, g.parent_total_mib)
            if g.mig_profile
            else (g.uuid, g.model, g.total_mib)
            for g in units
        }
    )


def _write(
    ledger: Ledger,
    at: float,
    obs: list[Observation],
    found: list[Discrepancy],
    node_record: NodeRecord | None,
    settle: list[Held],
) -> None:
    if node_record is not None:
        ledger.record_node(*node_record, at)
    for h in settle:
        ledger.record_received(h, at)
    if obs:
        ledger.observe(obs, at)
    for d in found:
        ledger.record_discrepancy(d.kind, d.node, d.gpu_uuid, d.pod_uid, d.amount_mib, d.detail, at)
