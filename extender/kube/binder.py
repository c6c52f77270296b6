"""The Kubernetes binder: one Binding that carries the pod's grant as annotations.

The API server copies a Binding's own ``metadata.annotations`` onto the pod in the same
update that sets ``spec.nodeName`` (the pod registry's binding storage, docs/protocol.md
§1.4), so the grant (``headroom.dev/gpu-uuids``, ``headroom.dev/gpu-memory-mib``) and the
node arrive together: whatever starts the pod on the node sees the grant, and an
extender that restarts rebuilds reservations from live pods. One API call per bind
instead of a PATCH and a Binding (bench/throughput.py measured the two calls as most of
a bind's time). The Binding's ``metadata.uid`` is a precondition: a pod replaced under
the same name is not bound. Transient API errors are retried within a deadline shorter
than kube-scheduler's extender timeout.

The Binding is one small JSON document POSTed over a kept-alive connection of the
bind thread's own (``keepalive.py``: the client's URL, TLS, client certificate and
bearer token), not through the generated ``CoreV1Api``, whose layer validated the
call's arguments, walked the ``V1Binding`` model and rebuilt the headers on every bind,
nor through the client's urllib3 pool (docs/BENCHMARKS.md, eighth and twelfth
throughput measurements). A client configuration that ``keepalive.py`` does not
reproduce (a proxy, say) POSTs through that pool.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from extender.kube.client import api_client, is_transient
from extender.kube.keepalive import KeepAlive, Reply
from extender.scheduling.binder import BindError
from extender.wire.retry import call_with_retry

BIND_DEADLINE_S = 3.0  # kube-scheduler's default httpTimeout is 5 s


class KubeBinder:
    def __init__(self, api: client.ApiClient, deadline_s: float = BIND_DEADLINE_S) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.deadline_s = deadline_s
        self.lean = KeepAlive.of(api.configuration, timeout_s=deadline_s)

    @classmethod
    def from_config(cls, kubeconfig: str | None) -> KubeBinder:
        return cls(api_client(kubeconfig))

    def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None:
        try:
            self._retry(lambda: self._bind(namespace, name, uid, node, annotations))
        except ApiException as e:
            raise BindError(_explain(e, namespace, name)) from None
        except Exception as e:
            raise BindError(f"pod {namespace}/{name}: API server unreachable: {e}") from None

    def _retry(self, fn: object) -> None:
        call_with_retry(fn, is_transient, deadline_s=self.deadline_s)  # type: ignore[arg-type]

    def _bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None:
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            metadata["annotations"] = annotations
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/binding"
        try:
            self._post(path, json.dumps(binding).encode())
        except ApiException as e:
            if e.status == 409 and self._bound_to(namespace, name) == node:
                return  # already bound here: binding again is a no-op
            raise

    def _post(self, path: str, body: bytes) -> None:
        """POST ``body`` to the API server; ``ApiException`` for a status >= 400."""
        headers = {
            **self.api.default_headers,
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        if self.lean is not None:
            reply = self.lean.post(path, body, headers)
        else:
            reply = self._pooled(path, body, headers)
        if reply.status >= 400:
            raise ApiException(
                status=reply.status, reason=reply.reason, body=reply.data.decode(errors="replace")
            )

    def _pooled(self, path: str, body: bytes, headers: dict[str, str]) -> Reply:
        """Through the client's own urllib3 pool (the configurations keepalive.py
        does not reproduce), its token read as the client reads it."""
        token = self.api.configuration.auth_settings().get("BearerToken")
        if token:
            headers = {**headers, token["key"]: token["value"]}
        reply = self.api.rest_client.pool_manager.request(
            "POST", self.api.configuration.host + path, body=body, headers=headers
        )  # read whole (preload): the connection goes back to the pool for the next bind
        return Reply(reply.status, reply.reason or "", reply.data)

    def _bound_to(self, namespace: str, name: str) -> str | None:
        raw: Any = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        node: str | None = json.loads(raw.data).get("spec", {}).get("nodeName")
        return node


def _explain(e: ApiException, namespace: str, name: str) -> str:
    reason = ""
    with contextlib.suppress(ValueError):
        reason = json.loads(e.body or "{}").get("message", "")
    if e.status == 404:
        return f"pod {namespace}/{name} no longer exists (deleted while binding)"
    return f"pod {namespace}/{name}: API {e.status} {e.reason}: {reason}".rstrip(": ")
