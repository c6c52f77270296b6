"""The pods bound to this node, read fresh from the API server, and their acknowledgement.

Why a fresh LIST per kubelet call rather than a watch cache: kubelet admits a pod moments
after its Binding, and a cache that has not seen the bind's annotations yet would make
the plugin fail a pod it could have served. Allocate is rare (once per container start),
so one filtered LIST (``spec.nodeName``) per call is cheap next to starting a container.
"""

from __future__ import annotations

from typing import Any, Protocol

from drivers.deviceplugin.grants import PodView


class PodSource(Protocol):
    """Where the plugin reads its node's pods and writes acknowledgements."""

    def pods(self) -> list[PodView]: ...

    def annotate(self, pod: PodView, key: str, value: str) -> None: ...


class KubePods:
    """``PodSource`` over the Kubernetes API (``kubernetes`` client's CoreV1Api)."""

    def __init__(self, core: Any, node: str, resource: str, timeout_s: float = 5.0) -> None:
        self.core = core
        self.node = node
        self.resource = resource
        self.timeout_s = timeout_s

    def pods(self) -> list[PodView]:
        resp = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node}", _request_timeout=self.timeout_s
        )
        return [view_of(p, self.resource) for p in resp.items]

    def annotate(self, pod: PodView, key: str, value: str) -> None:
        # a strategic-merge patch of one annotation, guarded by the pod's UID so a pod
        # deleted and recreated under the same name is never acknowledged by mistake
        body = {"metadata": {"uid": pod.uid, "annotations": {key: value}}}
        self.core.patch_namespaced_pod(
            pod.name, pod.namespace, body, _request_timeout=self.timeout_s
        )


def view_of(pod: Any, resource: str) -> PodView:
    """A ``V1Pod`` reduced to what the plugin needs."""
    meta, spec, status = pod.metadata, pod.spec, pod.status
    phase = getattr(status, "phase", None) if status is not None else None
    created = meta.creation_timestamp.timestamp() if meta.creation_timestamp else 0.0
    terminal = phase in ("Succeeded", "Failed")
    return PodView(
        uid=str(meta.uid),
        namespace=str(meta.namespace),
        name=str(meta.name),
        annotations=dict(meta.annotations or {}),
        requested=requested(spec, resource),
        created=created,
        active=not terminal and meta.deletion_timestamp is None,
        terminal=terminal,
    )


def requested(spec: Any, resource: str) -> int:
    """Devices of ``resource`` the pod asks for, as kubelet counts them: the sum over app
    containers, or the largest init container's limit when that is more."""

    def limit(c: Any) -> int:
        res = getattr(c, "resources", None)
        limits = (getattr(res, "limits", None) or {}) if res is not None else {}
        raw = limits.get(resource)
        if raw is None:
            return 0
        try:
            return int(str(raw))  # extended resources are whole numbers ("2")
        except ValueError:
            return 0

    app = sum(limit(c) for c in (spec.containers or []))
    init = max((limit(c) for c in (spec.init_containers or [])), default=0)
    return max(app, init)
