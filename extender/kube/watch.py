"""List+watch one resource kind with resourceVersion, like an informer.

Lists in pages, then watches from the list's resourceVersion; a 410 Gone (the version
fell out of etcd's window) triggers a fresh list; any other failure reconnects with
jittered exponential backoff. Handlers get plain dicts and run on this thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from extender.core.runtime import collect_due
from extender.wire.retry import reconnecting

log = logging.getLogger("headroom.kube.watch")

WATCH_TIMEOUT_S = 300
PAGE = 500


@dataclass(frozen=True)
class Kind:
    api_version: str  # "v1", "resource.k8s.io/v1", "karpenter.sh/v1"
    kind: str
    optional: bool = False  # absent API (e.g. no Karpenter) is not an error


Handler = Callable[[str, dict[str, Any]], None]  # (ADDED|MODIFIED|DELETED|SYNC, object)


class Watcher(threading.Thread):
    def __init__(
        self,
        dyn: DynamicClient,
        kind: Kind,
        on_list: Callable[[list[dict[str, Any]]], None],
        on_event: Handler,
        stop: threading.Event,
    ) -> None:
        super().__init__(name=f"watch-{kind.kind}", daemon=True)
        self.dyn, self.kind = dyn, kind
        self.on_list, self.on_event = on_list, on_event
        self.stop_event = stop
        self.synced = threading.Event()
        self.absent = False
        self._watch: watch.Watch | None = None

    def run(self) -> None:
        while not self.stop_event.is_set() and not self.absent:
            # a failed cycle is retried with the one backoff policy; a cycle that ends
            # normally (watch timeout, 410 Gone) starts a fresh list at once
            try:
                for attempt in reconnecting(self.stop_event, self._log_retry):
                    with attempt:
                        self._cycle()
            except Exception:
                return

    def _cycle(self) -> None:
        """Discover, list, then watch until the stream ends."""
        try:
            resource = self.dyn.resources.get(
                api_version=self.kind.api_version, kind=self.kind.kind
            )
        except ResourceNotFoundError:
            if not self.kind.optional:
                raise
            self.absent = True
            self.synced.set()
            log.info("API not served; not watching", extra={"kind": self.kind.kind})
            return
        try:
            rv = self._list(resource)
            self.synced.set()
            self._stream(resource, rv)
        except ApiException as e:
            if e.status != 410:
                raise
            log.info("watch expired (410 Gone); re-listing", extra={"kind": self.kind.kind})

    def _log_retry(self, error: BaseException | None, sleep_s: float) -> None:
        log.warning(
            "watch failed; reconnecting",
            extra={"kind": self.kind.kind, "error": str(error)[:300], "retry_s": round(sleep_s, 2)},
        )

    def _list(self, resource: Any) -> str:
        items: list[dict[str, Any]] = []
        token = None
        while True:
            page = resource.get(limit=PAGE, _continue=token).to_dict()
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                self.on_list(items)
                return str(page["metadata"]["resourceVersion"])

    def _stream(self, resource: Any, rv: str) -> None:
        # the stream DynamicClient.watch reads, without the ResourceInstance it wraps
        # around every event: the handlers take the plain dict (raw_object), and that
        # wrapping cost more than the rest of a pod event
        self._watch = watch.Watch()
        for event in self._watch.stream(
            resource.get,
            serialize=False,
            resource_version=rv,
            timeout_seconds=WATCH_TIMEOUT_S,
            allow_watch_bookmarks=True,
        ):
            if self.stop_event.is_set():
                self._watch.stop()
                return
            kind, obj = event["type"], event["raw_object"]
            if kind == "ERROR":
                code = obj.get("code") if isinstance(obj, dict) else None
                raise ApiException(status=code or 500, reason=str(obj))
            if kind != "BOOKMARK":
                self.on_event(kind, obj)
                collect_due()  # what the event left alive, collected on this thread

    def halt(self) -> None:
        self.stop_event.set()
        if self._watch is not None:
            self._watch.stop()
