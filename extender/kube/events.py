"""Kubernetes Events for pods that fit nowhere, posted off the hot path.

Karpenter simulates kube-scheduler and cannot see why the extender refused a node, so a
pod refused only for measured GPU usage would sit Pending silently. Each such pod gets
one Event (again after ``every_s``) naming the reasons; a queue and a worker thread keep
the API call out of the filter request.
"""

from __future__ import annotations

import logging
import queue
import threading
from datetime import UTC, datetime

from kubernetes import client

from extender.core.allocation import PodRef
from extender.wire.clock import Clock

log = logging.getLogger("headroom.kube.events")
REASON = "GPUHeadroomUnavailable"


class EventRecorder:
    def __init__(self, api: client.ApiClient, clock: Clock, every_s: float = 300.0) -> None:
        self.core = client.CoreV1Api(api)
        self.clock = clock
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._queue: queue.Queue[tuple[PodRef, str]] = queue.Queue(maxsize=1000)
        threading.Thread(target=self._run, name="events", daemon=True).start()

    def unplaceable(self, pod: PodRef, reasons: dict[str, str]) -> None:
        now = self.clock.now()
        if now - self._last.get(pod.uid, -1e18) < self.every_s:
            return
        self._last[pod.uid] = now
        if len(self._last) > 100_000:
            self._last.clear()
        try:
            self._queue.put_nowait((pod, summarize(reasons)))
        except queue.Full:
            log.warning("event queue full; dropping", extra={"pod": pod.uid})

    def _run(self) -> None:
        while True:
            pod, message = self._queue.get()
            try:
                self.core.create_namespaced_event(pod.namespace, _event(pod, message))
            except Exception as e:
                log.warning("could not post event", extra={"pod": pod.uid, "error": str(e)[:200]})


def summarize(reasons: dict[str, str], limit: int = 5) -> str:
    """``0/N nodes have GPU headroom: node-a: ...; node-b: ...`` (first few)."""
    parts = [f"{node}: {why}" for node, why in sorted(reasons.items())[:limit]]
    more = f"; and {len(reasons) - limit} more" if len(reasons) > limit else ""
    return f"0/{len(reasons)} nodes have GPU headroom for this pod: " + "; ".join(parts) + more


def _event(pod: PodRef, message: str) -> client.CoreV1Event:
    now = datetime.now(UTC)
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{pod.name}.", namespace=pod.namespace),
        involved_object=client.V1ObjectReference(
            kind="Pod", name=pod.name, namespace=pod.namespace, uid=pod.uid
        ),
        reason=REASON,
        message=message[:1024],
        type="Warning",
        source=client.V1EventSource(component="headroom-extender"),
        first_timestamp=now,
        last_timestamp=now,
        count=1,
    )
