"""One unacknowledged grant per device-plugin node: the extender keeps the node
unambiguous for headroom's device plugin.

kubelet's Allocate names devices, never the pod. The plugin (drivers/deviceplugin)
ties the devices to the one pod bound to its node whose grant it has not acknowledged
yet (``headroom.dev/allocated``), and refuses when two could be meant. Two pending
grants that share a GPU cannot be told apart at all; two on different GPUs can by
Allocate, but not by GetPreferredAllocation, which steers kubelet to the *oldest*
pending grant's GPUs: if kubelet admits the younger pod first (its bind reached the node
first, or the older one was retried), kubelet takes the older pod's slot and Allocate
then acknowledges the older pod with the younger pod's container. So the rule is the
simple one: while a grant on a node awaits acknowledgement, no other GPU pod is bound
there. The node fails filter with a reason naming the pod and the wait, and bind
refuses a pod that filter let through just before.

The wait ends when the pod watch sees the acknowledgement (an ``acknowledged`` ledger
event), when the pod is gone or its bind failed, or after ``timeout_s`` (an
``unacknowledged`` discrepancy; the grant stays reserved and billed as bound, because
the pod may still start once the plugin comes back, and a released grant would then run
unrecorded: the plugin itself still refuses anything ambiguous, so ending the wait is
safe). It applies only on nodes labelled for the plugin (``nodefacts.DEVICE_PLUGIN``)
and only while a cluster is watched: without a pod watch no acknowledgement can ever be
seen, so standalone mode never waits.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from extender.core.allocation import EventKind
from extender.ledger.base import Ledger
from extender.state.demand import DemandError, demand_of
from extender.state.inventory import Inventory
from extender.wire.annotations import ANN_ALLOCATED, ANN_GPU_UUIDS
from extender.wire.clock import Clock
from extender.wire.protocol import Pod

log = logging.getLogger("headroom.acks")


@dataclass(frozen=True, slots=True)
class Awaited:
    """A grant bound to a device-plugin node and not yet acknowledged."""

    uid: str
    pod: str  # namespace/name
    node: str
    since: float  # when it was bound (or first seen pending, after a restart)
    gpus: tuple[str, ...]


WAITING = "for the device plugin to acknowledge pod"  # in every waiting_reason


def waiting_reason(pod: str, since: float, now: float) -> str:
    """Why the node takes no GPU pod now, in words a person can act on."""
    return (
        f"waiting {max(now - since, 0.0):.0f}s {WAITING} "
        f"{pod} (bound here, not yet admitted by kubelet); one unacknowledged GPU grant "
        "per node"
    )


class Acks:
    """The unacknowledged grant of each device-plugin node. Thread-safe: binds, the pod
    watch and the expiry sweep call it from their own threads."""

    def __init__(self, inventory: Inventory, ledger: Ledger, clock: Clock, timeout_s: float):
        self.inventory, self.ledger, self.clock = inventory, ledger, clock
        self.timeout_s = timeout_s
        self.enabled = False  # set when a cluster is watched (acknowledgements observable)
        # the inventory's lock: bind takes a node's turn inside its evaluation of the node
        # (under that lock), and the waits write the inventory; one lock, no ordering
        self._lock = inventory.lock
        self._by_node: dict[str, Awaited] = {}
        self._by_uid: dict[str, Awaited] = {}
        self._expired: dict[str, Awaited] = {}  # timed out: an ack may still come late

    def applies(self, node: str) -> bool:
        """The rule holds on this node: a cluster is watched and the node runs the plugin."""
        facts = self.inventory.facts(node) if self.enabled else None
        return facts is not None and facts.device_plugin

    def hold(self, node: str, uid: str, pod: str, gpus: Sequence[str]) -> str:
        """The node's turn for this pod's bind: "" when taken (or the rule does not apply),
        else why the node must wait. Taken before the ledger write, so two binds racing
        onto one node cannot both pass."""
        if not gpus or not self.applies(node):
            return ""
        now = self.clock.now()
        with self._lock:
            current = self._by_node.get(node)
            if current is not None and current.uid != uid:
                return waiting_reason(current.pod, current.since, now)
            if current is None:
                self._put(Awaited(uid, pod, node, now, tuple(gpus)))
        return ""

    def drop(self, uid: str) -> None:
        """The pod's bind failed or the pod is gone: its node is free again."""
        with self._lock:
            self._expired.pop(uid, None)
            self._remove(uid)

    def seen(
        self,
        uid: str,
        pod: str,
        node: str,
        gpus: Sequence[str],
        allocated: Sequence[str],
        n: int,
        running: bool = False,
    ) -> None:
        """The pod watch saw a bound pod with a grant of ``gpus`` for ``n`` devices, of
        which the plugin acknowledged ``allocated``. A complete acknowledgement ends the
        wait (recorded once); an incomplete one on a free node is taken up as a wait
        (after a restart the watch is how pending grants are found again). A pod
        ``running`` without the acknowledgement was admitted by another plugin (started
        before the node was labelled, docs/deploy.md): nothing to wait for."""
        if not gpus or n <= 0 or not self.applies(node):
            return
        done = len(set(allocated)) >= n
        now = self.clock.now()
        with self._lock:
            current = self._by_uid.get(uid) or self._expired.get(uid)
            if not done and running:
                self._expired.pop(uid, None)
                self._remove(uid)
                return
            if not done:
                if current is None and node not in self._by_node:
                    self._put(Awaited(uid, pod, node, now, tuple(gpus)))
                return
            if current is None:
                return
            self._expired.pop(uid, None)
            self._remove(uid)
        waited = now - current.since
        log.info(
            "grant acknowledged",
            extra={"pod": pod, "node": node, "slots": ",".join(allocated), "waited_s": waited},
        )
        try:
            self.ledger.record_ack(uid, pod, node, allocated, gpus, waited, now)
        except Exception as e:  # the wait is over either way; the trail misses one event
            log.error("ledger: acknowledgement not recorded", extra={"pod": pod, "error": str(e)})

    def expire(self) -> list[Awaited]:
        """End the waits older than the timeout, each an ``unacknowledged`` finding."""
        now = self.clock.now()
        with self._lock:
            late = [a for a in self._by_uid.values() if now - a.since > self.timeout_s]
            for a in late:
                self._remove(a.uid)
                self._expired[a.uid] = a
        for a in late:
            detail = (
                f"pod {a.pod} bound {now - a.since:.0f}s ago on GPUs {','.join(a.gpus)}; the "
                f"device plugin did not acknowledge it within {self.timeout_s:.0f}s "
                "(plugin down, kubelet not admitting, or node unreachable)"
            )
            log.warning("grant not acknowledged in time", extra={"pod": a.pod, "node": a.node})
            try:
                self.ledger.record_discrepancy(
                    EventKind.UNACKNOWLEDGED, a.node, a.gpus[0], a.uid, 0, detail, now
                )
            except Exception as e:  # the node is free either way; the finding is logged
                log.error("ledger: finding not recorded", extra={"pod": a.pod, "error": str(e)})
        return late

    def awaited(self) -> list[Awaited]:
        """The waits now, by node (the refused pods' nudge, tests, diagnostics)."""
        with self._lock:
            return sorted(self._by_node.values(), key=lambda a: a.node)

    def node_gone(self, node: str) -> None:
        """The node left: nothing on it waits any more."""
        with self._lock:
            for uid in [a.uid for a in self._by_uid.values() if a.node == node]:
                self._remove(uid)
            for uid in [a.uid for a in self._expired.values() if a.node == node]:
                del self._expired[uid]

    def _put(self, a: Awaited) -> None:
        self._by_node[a.node] = self._by_uid[a.uid] = a
        self.inventory.set_awaiting(a.node, (a.pod, a.since))

    def _remove(self, uid: str) -> None:
        a = self._by_uid.pop(uid, None)
        if a is not None and self._by_node.get(a.node) is a:
            del self._by_node[a.node]
            self.inventory.set_awaiting(a.node, None)


def ack_seen(acks: Acks, pod: Pod, node: str) -> None:
    """Hand the watch's view of a bound pod to ``acks``: its granted GPUs, the slots the
    plugin acknowledged, and how many devices it asks (as kubelet counts them; MIG
    profiles are not the plugin's)."""
    ann = pod.metadata.annotations or {}
    gpus = [u for u in ann.get(ANN_GPU_UUIDS, "").split(",") if u]
    if not gpus:
        return
    try:
        demand = demand_of(pod)
    except DemandError:
        return
    n = 0 if demand.mig_profile else demand.count
    allocated = [a for a in ann.get(ANN_ALLOCATED, "").split(",") if a]
    key = f"{pod.metadata.namespace}/{pod.metadata.name}"
    running = pod.status.phase == "Running"
    acks.seen(pod.metadata.uid, key, node, gpus, allocated, n, running)
