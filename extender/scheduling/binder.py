"""Making the Binding: an interface, and the in-process binder for standalone mode.

The extender decides and records first, then asks a ``Binder`` to bind; the Kubernetes
binder (extender/kube) creates the pod's ``binding`` subresource. In standalone mode
and in ``headroom simulate`` there is no API server, so bindings are kept in memory.
"""

from __future__ import annotations

import threading
from typing import Protocol


class BindError(Exception):
    """The Binding could not be made; the message goes back in the protocol's Error."""


class Binder(Protocol):
    def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None:
        """Bind the pod to the node, first writing ``annotations`` (the grant) on it.

        Must be idempotent: binding a pod again to the same node succeeds."""
        ...


class InProcessBinder:
    """Records bindings in memory; refuses to move a pod already bound elsewhere."""

    def __init__(self) -> None:
        self._bound: dict[str, str] = {}
        self._annotations: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None:
        with self._lock:
            current = self._bound.get(uid)
            if current is not None and current != node:
                raise BindError(f"pod {namespace}/{name} is already bound to {current}")
            self._bound[uid] = node
            self._annotations[uid] = dict(annotations)

    def forget(self, uid: str) -> None:
        """The pod ended: drop what was kept for it (standalone mode has no API server)."""
        with self._lock:
            self._bound.pop(uid, None)
            self._annotations.pop(uid, None)

    def node_of(self, uid: str) -> str | None:
        return self._bound.get(uid)

    def annotations_of(self, uid: str) -> dict[str, str]:
        return dict(self._annotations.get(uid, {}))
