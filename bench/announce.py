"""bench/latency.py's ``--announce``: each pod created in a real API server (etcd and
kube-apiserver from tests/e2e/build.sh) before its filter is sent, so the extender's pod
watch sees it first, as it sees a pod kube-scheduler is about to schedule.

kube-scheduler's informer gets a new pod when the extender's watch does; it then takes
the pod from its queue and runs its own filter plugins over every node before it calls
the extender's filter. ``lead_ms`` stands for that time, and the bench waits it out
between the API server's answer to the create and the filter. The filter gets the pod
as the API server serves it (without ``managedFields``, which kube-scheduler's informer
drops), and the floor gets the very same body.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tests.e2e.cluster import ControlPlane, build_binaries

NAMESPACE = "bench"
IMAGE = "registry.k8s.io/pause:3.10"  # the API server wants one; nothing runs it


class Announcer:
    """A control plane for the run; calling it creates a pod there, then waits the lead."""

    def __init__(self, lead_ms: float) -> None:
        self.lead_s = lead_ms / 1e3
        self._dir = tempfile.TemporaryDirectory(prefix="bench-announce-")
        workdir = Path(self._dir.name)
        (workdir / "logs").mkdir()
        self.plane = ControlPlane(workdir=workdir, bin_dir=build_binaries(workdir / "build.log"))
        self._names = itertools.count()
        self.api: httpx.Client | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    def __enter__(self) -> Announcer:
        self.plane.start()
        self.api = httpx.Client(
            base_url=self.plane.server,
            verify=self.plane.ssl_context(),
            headers={"Authorization": f"Bearer {self.plane.token}"},
            timeout=30,
        )
        self._post("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        # ServiceAccount admission wants the namespace's "default" account, which the
        # controller-manager (not run here) would make
        self._post(
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": "default"}}
        )
        return self

    def __call__(self, pod: dict[str, Any], gpu: bool = True) -> dict[str, Any]:
        """``pod`` created under a name of its own (the API server gives it its uid), and
        the lead waited out; returns the pod as the API server serves it. ``gpu=False``:
        its GPU ask left out, so the extender prepares nothing for it (what the floor's
        requests follow: the same create, watch event and wait, no plan made)."""
        meta = {**pod["metadata"], "name": f"bench-{next(self._names)}", "namespace": NAMESPACE}
        meta.pop("uid", None)
        containers = [{"image": IMAGE, **c} for c in pod["spec"]["containers"]]
        if not gpu:
            containers = [{**c, "resources": {}} for c in containers]
        spec = {**pod["spec"], "containers": containers}
        body = {**pod, "metadata": meta, "spec": spec}
        served = self._post(f"/api/v1/namespaces/{NAMESPACE}/pods", body)
        served["metadata"].pop("managedFields", None)
        time.sleep(self.lead_s)
        return served

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self.api is not None, "used outside its with-block"
        r = self.api.post(path, json=body)
        r.raise_for_status()
        created: dict[str, Any] = r.json()
        return created

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.api is not None:
            self.api.close()
        self.plane.stop()
        with contextlib.suppress(OSError):
            self._dir.cleanup()
