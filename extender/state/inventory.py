"""What the extender knows about each node: measured GPUs, node facts, reservations.

Reports replace a node's measurements (each GPU's per-pod use among them,
``state.measured``); grants reserve memory per GPU until released, so two pods in flight
never both take the last slice of one GPU. A GPU's committed memory is each granted
pod's max(grant, use) plus ungranted pods' use plus unattributed memory
(``state.committed``), so an overrun is never hidden by idle grants. ``view()`` turns the
state (with the node's CPU and memory, ``state.host``) into the plain ``NodeView``
scoring works on, rebuilt on change; ``columns()`` gives every node at once as arrays.
Thread-safe: reports, binds and releases may come from different threads.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Collection

import msgspec

from extender.pricing import NodePrice, PriceBook
from extender.scoring.model import GpuView, NodeView, Overrun
from extender.state.columns import NodeColumns
from extender.state.committed import committed
from extender.state.grant import Grant, ReportRefused
from extender.state.host import HostLoad, allocatable_of
from extender.state.measured import MeasuredGpu, measured_gpus
from extender.state.nodefacts import NodeFacts, facts_from_labels
from extender.wire.report import NodeReport, PodGrant

__all__ = ["Grant", "Inventory", "ReportRefused"]


class _Node(msgspec.Struct, gc=False):  # one per node, no cycles: see scoring.model
    facts: NodeFacts
    facts_from_report: bool = True
    gpus: tuple[MeasuredGpu, ...] = ()
    received_at: float | None = None
    version: int = 0
    view: NodeView | None = None
    price: NodePrice | None = None
    draining: bool = False  # Karpenter is deleting this node's NodeClaim
    awaiting: tuple[str, float] | None = None  # a grant not yet acknowledged: (pod, since)


class Inventory:
    def __init__(self, pricebook: PriceBook) -> None:
        self._pricebook = pricebook
        self._nodes: dict[str, _Node] = {}
        self._grants: dict[str, list[Grant]] = {}  # pod uid -> its grants
        self._pods_on: dict[str, set[str]] = defaultdict(set)  # node -> pod uids with grants
        # (node, gpu uuid) -> pod uid -> MiB reserved: keyed by node too, so a report that
        # names another node's GPU cannot shrink that node's headroom; per pod, so each
        # pod's grant meets its measured use (``state.committed``)
        self._reserved: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
        self._owner: dict[str, str] = {}  # gpu uuid (MIG: its parent's) -> node reporting it
        self._lock = threading.RLock()
        self._seq = 0
        self._columns = NodeColumns()
        self._dirty: set[str] = set()  # nodes whose columns row is behind
        self._host = HostLoad()  # pods' CPU and memory requests per node

    # --- inputs ----------------------------------------------------------------------

    def update_facts(self, facts: NodeFacts) -> None:
        """Facts from Kubernetes (scheduler-sent Nodes or the watch) win over report labels."""
        with self._lock:
            node = self._nodes.get(facts.name)
            if node is None:
                self._nodes[facts.name] = _Node(facts, facts_from_report=False)
                self._touch(facts.name)
            elif node.facts != facts or node.facts_from_report:
                node.facts, node.facts_from_report = facts, False
                self._touch(facts.name)

    def apply_report(
        self, report: NodeReport, received_at: float, stale_after: float = float("inf")
    ) -> None:
        """Take a node's measurements. A GPU belongs to one node: a report naming a GPU
        that another node reported within ``stale_after`` is refused (ReportRefused)."""
        gpus = measured_gpus(report)
        try:
            allocatable = allocatable_of(report.allocatable, "allocatable")
        except ValueError as e:
            raise ReportRefused(str(e)) from None
        with self._lock:
            self._claim_gpus(report.node, gpus, received_at - stale_after)
            node = self._nodes.get(report.node)
            if node is None:
                node = self._nodes[report.node] = _Node(
                    facts_from_labels(report.node, report.labels)
                )
            changed = gpus != node.gpus or node.received_at is None
            if node.facts_from_report and (report.labels or report.allocatable):
                facts = msgspec.structs.replace(
                    facts_from_labels(report.node, report.labels),
                    cpu_allocatable_milli=allocatable[0],
                    memory_allocatable_mib=allocatable[1],
                )
                changed = changed or facts != node.facts
                node.facts = facts
            node.gpus, node.received_at = gpus, received_at
            if changed:  # the row now, not on the next filter: reports are off its path
                self._touch(report.node)
                self._write_row(report.node)
                self._dirty.discard(report.node)
            else:
                self._columns.set_received(report.node, received_at)

    def _claim_gpus(self, name: str, gpus: tuple[MeasuredGpu, ...], fresh_since: float) -> None:
        physical = {g.parent_uuid or g.uuid for g in gpus}
        for uuid in physical:
            owner = self._owner.get(uuid)
            if owner is None or owner == name:
                continue
            other = self._nodes.get(owner)
            seen = other.received_at if other is not None else None
            if other is not None and seen is not None and seen >= fresh_since:
                raise ReportRefused(
                    f"GPU {uuid[:48]} is reported by node {owner!r}; a GPU belongs to one "
                    f"node, so this report for {name!r} is refused"
                )
        self._disown(name, keep=physical)
        for uuid in physical:
            self._owner[uuid] = name

    def _disown(self, name: str, keep: Collection[str] = ()) -> None:
        """Forget which GPUs the node's last report named (other than ``keep``)."""
        node = self._nodes.get(name)
        for g in node.gpus if node is not None else ():
            uuid = g.parent_uuid or g.uuid
            if uuid not in keep and self._owner.get(uuid) == name:
                del self._owner[uuid]

    def set_draining(self, name: str, draining: bool) -> None:
        """Karpenter's NodeClaim for this node is being deleted: no new GPU pods."""
        self._set(name, "draining", draining)

    def set_awaiting(self, name: str, awaiting: tuple[str, float] | None) -> None:
        """A grant on the node awaits its device plugin's acknowledgement (the pod, when
        bound), or none does: no new GPU pods while one does (scheduling/acks.py)."""
        self._set(name, "awaiting", awaiting)

    def _set(self, name: str, field: str, value: object) -> None:
        with self._lock:
            node = self._nodes.get(name)
            if node is None:
                node = self._nodes[name] = _Node(facts_from_labels(name, {}))
            if getattr(node, field) != value:
                setattr(node, field, value)
                self._touch(name)

    def empty_like(self) -> Inventory:
        """An empty inventory pricing nodes alike (the start-up warm-up's scratch)."""
        return Inventory(self._pricebook)

    def name_known(self, name: str, token: object, wire_id: int) -> None:
        """The id the HTTP edge's decoder reads the node's name as (``NodeColumns``)."""
        with self._lock:
            self._columns.name_known(name, token, wire_id)

    def draining(self, name: str) -> bool:
        return bool((node := self._nodes.get(name)) and node.draining)

    def awaiting(self, name: str) -> tuple[str, float] | None:
        return node.awaiting if (node := self._nodes.get(name)) else None

    def remove_node(self, name: str) -> None:
        with self._lock:
            self._disown(name)
            self._nodes.pop(name, None)
            self._touch(name)

    def reserve(self, grants: list[Grant]) -> bool:
        """Hold the grants' memory for their pod. A pod's reservation is never replaced:
        False (and nothing changed) when the pod already holds one."""
        if not grants:
            return True
        with self._lock:
            uid = grants[0].pod_uid
            if uid in self._grants:
                return False
            self._grants[uid] = list(grants)
            for g in grants:
                per_pod = self._reserved[g.node, g.gpu_uuid]
                per_pod[uid] = per_pod.get(uid, 0) + g.memory_mib
                self._pods_on[g.node].add(uid)
            self._touch_nodes({g.node for g in grants})
        return True

    def pod_requests(self, pod_uid: str, node: str, cpu_milli: int, memory_mib: int) -> None:
        """A pod on ``node`` (bound by us, or seen by the pod watch, any scheduler's)
        requests this much CPU and memory of it, until ``pod_gone`` or its release."""
        with self._lock:
            self._touch_nodes(self._host.put(pod_uid, node, cpu_milli, memory_mib))

    def pod_gone(self, pod_uid: str) -> None:
        with self._lock:
            self._touch_nodes(self._host.drop(pod_uid))

    def pods_listed(self, live: set[str]) -> None:
        with self._lock:
            self._touch_nodes(self._host.keep_only(live))

    def release(self, pod_uid: str, only: list[Grant] | None = None) -> list[Grant]:
        """Free the pod's reservation; with ``only``, just if it is still those grants, so
        a call that failed never frees what another call reserved for the same pod."""
        with self._lock:
            if only is not None and self._grants.get(pod_uid) != only:
                return []
            return self._release_locked(pod_uid)

    def _release_locked(self, pod_uid: str) -> list[Grant]:
        grants = self._grants.pop(pod_uid, [])
        self._touch_nodes(self._host.drop(pod_uid))
        for g in grants:
            pods = self._pods_on.get(g.node)
            if pods is not None:
                pods.discard(pod_uid)
                if not pods:
                    del self._pods_on[g.node]
            per_pod = self._reserved.get((g.node, g.gpu_uuid), {})
            left = per_pod.pop(pod_uid, 0) - g.memory_mib
            if left > 0:
                per_pod[pod_uid] = left
            if not per_pod:
                self._reserved.pop((g.node, g.gpu_uuid), None)
        self._touch_nodes({g.node for g in grants})
        return grants

    # --- reads -----------------------------------------------------------------------

    @property
    def lock(self) -> threading.RLock:
        """Held by bind around "evaluate the node, then reserve" so no two binds race."""
        return self._lock

    def facts(self, name: str) -> NodeFacts | None:
        node = self._nodes.get(name)
        return node.facts if node else None

    def measured(self, name: str) -> tuple[MeasuredGpu, ...]:
        """The node's schedulable units as last reported (MIG instances with their parent)."""
        node = self._nodes.get(name)
        return tuple(node.gpus) if node else ()

    def received_at(self, name: str) -> float | None:
        node = self._nodes.get(name)
        return node.received_at if node else None

    def node_names(self) -> list[str]:
        return list(self._nodes)

    def grants_of(self, pod_uid: str) -> list[Grant]:
        return list(self._grants.get(pod_uid, ()))

    def grants_on_node(self, node_name: str) -> list[Grant]:
        with self._lock:
            return [g for uid in self._pods_on.get(node_name, ()) for g in self._grants[uid]]

    def grants_on(self, node_name: str) -> list[PodGrant]:
        with self._lock:
            by_pod = [self._grants[uid] for uid in self._pods_on.get(node_name, ())]
        return [
            PodGrant(
                gs[0].pod_uid,
                gs[0].namespace,
                gs[0].name,
                [g.gpu_uuid for g in gs],
                gs[0].memory_mib,
            )
            for gs in by_pod
        ]

    def price(self, name: str) -> NodePrice | None:
        self.view(name)
        node = self._nodes.get(name)
        return node.price if node else None

    def columns(self) -> NodeColumns:
        """Every node as arrays, changed nodes' rows rewritten first."""
        with self._lock:
            for name in self._dirty:
                self._write_row(name)
            self._dirty.clear()
            return self._columns

    def _write_row(self, name: str) -> None:
        node = self._nodes.get(name)
        view = self.view(name) if node is not None else None
        if node is None or node.received_at is None or view is None:
            self._columns.drop(name)
        else:
            usable = not (node.facts.disrupted or node.draining or node.awaiting)
            self._columns.write(view, node.received_at, usable, self._seq)

    def view(self, name: str) -> NodeView | None:
        """The node as scoring sees it, or None if no agent has reported for it."""
        node = self._nodes.get(name)
        if node is None or node.received_at is None:
            return None
        cached = node.view
        if cached is not None and cached.version == node.version:
            return cached
        with self._lock:
            return self._build_view(name, node)

    def _build_view(self, name: str, node: _Node) -> NodeView:
        gpus = tuple(self._gpu_view(g, self._reserved.get((name, g.uuid), {})) for g in node.gpus)
        first = node.gpus[0] if node.gpus else None
        price = self._pricebook.node_price(
            node.facts.instance_type,
            node.facts.capacity_type,
            gpus=len({g.parent_uuid or g.uuid for g in node.gpus}),
            # a physical GPU's memory: a MIG instance's parent, not the instance
            gpu_memory_mib=(first.parent_total_mib or first.total_mib) if first else 0,
            gpu_model=first.model if first else node.facts.gpu_model_hint,
        )
        node.price = price
        cpu, memory = self._host.requested(name)
        node.view = NodeView(
            name=name,
            gpus=gpus,
            capacity_type=node.facts.capacity_type,
            instance_type=node.facts.instance_type,
            price_per_gib_hour=price.per_gib_hour_float if price else None,
            version=node.version,
            cpu_allocatable_milli=node.facts.cpu_allocatable_milli,
            memory_allocatable_mib=node.facts.memory_allocatable_mib,
            cpu_requested_milli=cpu,
            memory_requested_mib=memory,
        )
        return node.view

    def view_without(self, name: str, pod_uids: Collection[str]) -> NodeView | None:
        """The node as if these pods were gone (what evicting them frees, for preemption):
        their grants and their measured use out of every GPU's committed memory, so an
        overrunning victim frees all it holds, not just its grant. Not cached."""
        gone = set(pod_uids)
        with self._lock:
            node, view = self._nodes.get(name), self.view(name)
            if node is None or view is None:
                return None
            gpus = tuple(
                self._gpu_view(
                    msgspec.structs.replace(
                        g, pod_used=tuple(pu for pu in g.pod_used if pu[0] not in gone)
                    ),
                    {
                        p: m
                        for p, m in self._reserved.get((name, g.uuid), {}).items()
                        if p not in gone
                    },
                )
                for g in node.gpus
            )
        return msgspec.structs.replace(view, gpus=gpus, version=-1)

    def _gpu_view(self, g: MeasuredGpu, granted: dict[str, int]) -> GpuView:
        """One unit as scoring sees it: committed per pod (``state.committed``), with the
        pods that hold more than their grant named, so a refusal can say who."""
        whole = g.total_mib if g.mig_profile else None
        used = dict(g.pod_used) if g.pod_used else {}
        held = committed(granted, used, g.unattributed_mib, whole_mib=whole)
        name = self._pod_name
        overruns = tuple(Overrun(name(e.pod_uid), e.used_mib, e.granted_mib) for e in held.excess)
        return GpuView(
            uuid=g.uuid,
            index=g.index,
            model=g.model,
            total_mib=g.total_mib,
            committed_mib=held.mib,
            reserved_mib=sum(granted.values()),
            mig_profile=g.mig_profile,
            parent_total_mib=g.parent_total_mib,
            overruns=overruns,
        )

    def _pod_name(self, uid: str) -> str:
        """``namespace/name`` of a pod the extender granted something, else its UID."""
        grants = self._grants.get(uid)
        return f"{grants[0].namespace}/{grants[0].name}" if grants and grants[0].name else uid

    # --- internals -------------------------------------------------------------------

    @property
    def seq(self) -> int:
        return self._seq

    def _touch(self, name: str) -> None:
        self._seq += 1
        self._dirty.add(name)
        node = self._nodes.get(name)
        if node is not None:
            node.version = self._seq

    def _touch_nodes(self, names: set[str]) -> None:
        for name in names:
            self._touch(name)
