"""Feeds the service from the cluster: node facts, pod lifecycle, node deletion.

- Node added/changed -> inventory facts (labels, taints, deletion); Node deleted ->
  its allocations end with reason ``node-deleted`` (consolidation, spot interruption).
- Pod Pending, unbound and not gated, first seen so -> announced, so its plan is made
  before kube-scheduler's filter asks for it (``scheduling/announced.py``).
- Pod Running -> ``started``; Succeeded/Failed/deleted -> released with that reason.
- A bound pod's ``headroom.dev/allocated`` -> the device plugin's acknowledgement of
  its grant (``scheduling/acks.py``); a sweep ends waits past the ack timeout.
- On every (re-)list: ledger allocations whose pod no longer exists are released, and
  live pods carrying a grant annotation but unknown to the ledger are re-reserved, so a
  restart neither loses nor double-counts a reservation.
Nothing here runs on the filter/prioritize path; an announced pod's plan is made on the
event loop (between filters, one plan per callback).
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

import msgspec
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from extender.core.allocation import PodRef
from extender.dra.ingest import ClaimIngestError
from extender.dra.state import DraState
from extender.kube.watch import Kind, Watcher
from extender.scheduling.acks import WAITING
from extender.scheduling.service import SchedulingService
from extender.state.host import pod_requests
from extender.state.nodefacts import facts_from_node
from extender.state.podcache import pod_ref
from extender.wire.annotations import ANN_REQUEUED, ANN_UNACKNOWLEDGED
from extender.wire.logs import RateLimitedLog
from extender.wire.protocol import Node, Pod

log = logging.getLogger("headroom.kube.sync")
unannounced_log = RateLimitedLog(log, every_s=60.0)

NODES = Kind("v1", "Node")
PODS = Kind("v1", "Pod")
SLICES = Kind("resource.k8s.io/v1", "ResourceSlice", optional=True)
CLASSES = Kind("resource.k8s.io/v1", "DeviceClass", optional=True)
CLAIMS = Kind("resource.k8s.io/v1", "ResourceClaim", optional=True)
NODECLAIMS = Kind("karpenter.sh/v1", "NodeClaim", optional=True)
ENDED = {"Succeeded": "succeeded", "Failed": "failed"}


class ClusterSync:
    def __init__(self, api: client.ApiClient, service: SchedulingService) -> None:
        self.service = service
        self.dyn = DynamicClient(api)
        self.core = client.CoreV1Api(api)
        self.stop = threading.Event()
        self._pending: dict[str, dict[str, Any]] = {}  # uid -> Pending pod (bind fallback)
        self._announced: set[str] = set()  # pending pods told to the service, by uid
        self._started: set[str] = set()
        self._claim_pods: dict[str, PodRef] = {}  # uid -> pods that use ResourceClaims
        self._unresolved: dict[tuple[str, str], dict[str, Any]] = {}  # claims to retry
        self._lock = threading.Lock()
        self.dra = DraState()
        self.watchers = [
            Watcher(self.dyn, NODES, self._nodes_listed, self._node_event, self.stop),
            Watcher(self.dyn, PODS, self._pods_listed, self._pod_event, self.stop),
            Watcher(
                self.dyn,
                CLASSES,
                lambda items: self.dra.replace("class", items),
                lambda kind, obj: self.dra.put_class(obj, kind == "DELETED"),
                self.stop,
            ),
            Watcher(self.dyn, SLICES, self._slices_listed, self._slice_event, self.stop),
            Watcher(self.dyn, CLAIMS, self._claims_listed, self._claim_event, self.stop),
            Watcher(
                self.dyn, NODECLAIMS, self._nodeclaims_listed, self._nodeclaim_event, self.stop
            ),
        ]
        # pods refused by a node while it waited for its device plugin:
        # (node, the pod it waits for) -> uid -> the refused pod ("namespace/name")
        self._refused_by: dict[tuple[str, str], dict[str, str]] = {}
        service.unplaceable_hooks.append(self._refused)
        service.watch_cluster(self.dra, self._lookup)

    def start(self) -> None:
        for w in self.watchers:
            w.start()
        threading.Thread(target=self._expire_acks, name="ack-expiry", daemon=True).start()

    def _expire_acks(self) -> None:
        """Once a second: grants whose device plugin did not acknowledge them in time
        stop holding their node (scheduling/acks.py). Each such pod is annotated: the
        update is the cluster event on which kube-scheduler retries the pods that were
        refused the node while it waited (nothing else would tell it the node is free).
        Then the pods refused by a node that no longer waits, for any reason, are
        nudged (``_requeue_freed``)."""
        while not self.stop.wait(1.0):
            try:
                expired = self.service.expire_acks()
            except Exception:
                log.exception("ack expiry failed; retrying")
                continue
            for a in expired:
                self._annotate(a.pod, ANN_UNACKNOWLEDGED)
            self._requeue_freed()

    def _refused(self, pod: PodRef, reasons: dict[str, str]) -> None:
        """Filter found no node for ``pod`` (an unplaceable hook, on the event loop): the
        nodes that refused it because they wait for their device plugin are noted, with
        the pod each waits for."""
        waits = [
            (node, awaited)
            for node, awaited in self.service.awaits().items()
            if WAITING in reasons.get(node, "")
        ]
        with self._lock:  # the service is asked outside it: one lock at a time
            for wait in waits:
                self._refused_by.setdefault(wait, {})[pod.uid] = f"{pod.namespace}/{pod.name}"

    def _requeue_freed(self) -> None:
        """kube-scheduler retries a refused pod on the next cluster event, and the event
        that ends a wait (the awaited pod deleted, its bind failed, its acknowledgement)
        can reach it before the pod watch here: the retry is refused again, and nothing
        else would wake the pod for 5 minutes. So once a node no longer waits for the
        pod it waited for, each pod it refused meanwhile is annotated (``ANN_REQUEUED``),
        a pod update that makes kube-scheduler try it again."""
        waits = self.service.awaits()
        with self._lock:
            ended = [
                (node, awaited) for node, awaited in self._refused_by if waits.get(node) != awaited
            ]
            pods = [pod for wait in ended for pod in self._refused_by.pop(wait).values()]
        for pod in pods:
            self._annotate(pod, ANN_REQUEUED)

    def _annotate(self, pod: str, key: str) -> None:
        """``key`` set to now (RFC 3339) on ``pod`` ("namespace/name")."""
        namespace, _, name = pod.partition("/")
        now = self.service.clock.now()
        at = datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds")
        body = {"metadata": {"annotations": {key: at}}}
        try:
            self.core.patch_namespaced_pod(name, namespace, body, _request_timeout=5)
        except Exception as e:  # gone meanwhile, or the API is away: the 5-minute requeue
            log.warning("cannot annotate pod", extra={"pod": pod, "key": key, "error": str(e)})

    def wait_synced(self, timeout: float) -> bool:
        return all(w.synced.wait(timeout) for w in self.watchers)

    def close(self) -> None:
        for w in self.watchers:
            w.halt()

    # --- nodes ---------------------------------------------------------------------------

    def _nodes_listed(self, items: list[dict[str, Any]]) -> None:
        live = set()
        for obj in items:
            self._node_event("ADDED", obj)
            live.add(obj["metadata"]["name"])
        for a in self.service.allocations():
            if a.node.name not in live:
                self.service.node_gone(a.node.name, "node-deleted")

    def _node_event(self, kind: str, obj: dict[str, Any]) -> None:
        node = msgspec.convert(obj, Node)
        if kind == "DELETED":
            ended = self.service.node_gone(node.metadata.name, "node-deleted")
            log.info("node deleted", extra={"node": node.metadata.name, "allocations_ended": ended})
            return
        self.service.node_changed(facts_from_node(node))

    # --- pods ----------------------------------------------------------------------------

    def _pods_listed(self, items: list[dict[str, Any]]) -> None:
        live = {obj["metadata"]["uid"] for obj in items}
        self.service.pods_listed(live)
        with self._lock:  # pods deleted while the watch was down: no event tells
            self._pending = {u: o for u, o in self._pending.items() if u in live}
            self._announced &= live
        for a in self.service.allocations():
            if a.pod.uid not in live:
                self.service.release(a.pod.uid, "pod-gone")
        for obj in items:
            self._pod_event("ADDED", obj)

    def _pod_event(self, kind: str, obj: dict[str, Any]) -> None:
        meta, status = obj.get("metadata") or {}, obj.get("status") or {}
        uid, phase = meta.get("uid", ""), status.get("phase", "")
        node = (obj.get("spec") or {}).get("nodeName")
        waiting = kind != "DELETED" and phase == "Pending" and not node
        # schedulable: kube-scheduler takes it now (a gated pod waits for its gates)
        ready = waiting and not (obj.get("spec") or {}).get("schedulingGates")
        with self._lock:
            arrived = ready and uid not in self._announced
            if arrived:
                self._announced.add(uid)
            if waiting:
                self._pending[uid] = obj
            else:
                self._pending.pop(uid, None)
                self._announced.discard(uid)
            if kind == "DELETED":
                self._claim_pods.pop(uid, None)
            elif (obj.get("spec") or {}).get("resourceClaims") or status.get(
                "extendedResourceClaimStatus"
            ):  # its own claims, or the claim kube-scheduler made for nvidia.com/gpu
                self._claim_pods[uid] = pod_ref(msgspec.convert(obj, Pod))
        if arrived:  # kube-scheduler's informer sees it now too: its plan made ahead
            self._announce(obj)
        if kind == "DELETED":
            self._end(uid, "deleted")
        elif phase in ENDED:
            self._end(uid, ENDED[phase])
        elif node:
            pod = msgspec.convert(obj, Pod)
            cpu, memory = pod_requests(pod)
            self.service.pod_on_node(uid, node, cpu, memory)
            self.service.readopt(
                uid,
                meta.get("namespace", ""),
                meta.get("name", ""),
                node,
                meta.get("annotations") or {},
            )
            self.service.acknowledgement(pod, node)
            if phase == "Running" and uid not in self._started:
                self._started.add(uid)
                self.service.started(uid)

    def _announce(self, obj: dict[str, Any]) -> None:
        """Best effort: a pod that cannot be read is its filter's to answer, and must
        not end the watch (a re-list of every pod)."""
        try:
            self.service.announce(msgspec.convert(obj, Pod))
        except Exception as e:
            unannounced_log.warning("pod not announced", extra={"error": str(e)[:300]})

    def _end(self, uid: str, reason: str) -> None:
        self._started.discard(uid)
        self.service.pod_gone(uid)
        if self.service.holds(uid):
            self.service.release(uid, reason)

    # --- Karpenter --------------------------------------------------------------------

    def _nodeclaims_listed(self, items: list[dict[str, Any]]) -> None:
        for obj in items:
            self._nodeclaim_event("ADDED", obj)

    def _nodeclaim_event(self, kind: str, obj: dict[str, Any]) -> None:
        """A NodeClaim being deleted (consolidation, expiry, interruption) takes its node
        out of GPU scheduling before the Node object itself is tainted or gone."""
        node = (obj.get("status") or {}).get("nodeName")
        if not node:
            return
        terminating = kind != "DELETED" and bool(
            (obj.get("metadata") or {}).get("deletionTimestamp")
        )
        self.service.node_draining(node, terminating)

    # --- DRA ---------------------------------------------------------------------------

    def _slices_listed(self, items: list[dict[str, Any]]) -> None:
        self.dra.replace("slice", items)
        self._retry_claims()

    def _slice_event(self, kind: str, obj: dict[str, Any]) -> None:
        self.dra.put_slice(obj, kind == "DELETED")
        self._retry_claims()

    def _claims_listed(self, items: list[dict[str, Any]]) -> None:
        self.dra.replace("claim", items)
        for obj in items:
            self._ingest(obj)

    def _claim_event(self, kind: str, obj: dict[str, Any]) -> None:
        self.dra.put_claim(obj, kind == "DELETED")
        if kind != "DELETED":
            self._ingest(obj)

    def _ingest(self, claim: dict[str, Any]) -> None:
        meta = claim.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        pods = self._reserving(claim)
        try:
            recorded = self.service.ingest_claim(claim, pods)
        except ClaimIngestError as e:
            self._unresolved[key] = claim
            log.info("claim not ingested yet", extra={"claim": "/".join(key), "why": str(e)})
            return
        self._unresolved.pop(key, None)
        if recorded:
            log.info("DRA allocation recorded", extra={"claim": "/".join(key), "pods": recorded})

    def _reserving(self, claim: dict[str, Any]) -> dict[str, PodRef]:
        """The pods known to use claims, and those the claim is reserved for that are still
        pending: kube-scheduler reserves a claim (and makes KEP-5004 pods' claims) in
        PreBind, before the pod is bound or its status names the claim."""
        reserved = ((claim.get("status") or {}).get("reservedFor")) or []
        uids = [r.get("uid", "") for r in reserved if isinstance(r, dict)]
        with self._lock:
            pods = dict(self._claim_pods)
            pending = {u: self._pending[u] for u in uids if u not in pods and u in self._pending}
        for uid, obj in pending.items():
            pods[uid] = pod_ref(msgspec.convert(obj, Pod))
        return pods

    def _retry_claims(self) -> None:
        for claim in list(self._unresolved.values()):
            self._ingest(claim)

    def _lookup(self, uid: str) -> Pod | None:
        with self._lock:
            obj = self._pending.get(uid)
        return msgspec.convert(obj, Pod) if obj is not None else None
