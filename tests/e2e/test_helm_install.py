"""``helm install`` of charts/headroom into the real kube-apiserver, then ``helm upgrade``.

What ``helm template`` cannot show (tests/test_chart.py renders offline): the API server
itself accepts every object the chart makes (its own validation, not a schema copy), and
an upgrade keeps the generated webhook certificate and audit token, because the chart
finds them with ``lookup``. A new CA on every upgrade would break the webhook until the
kubelet synced the Secret; a new token would lock out every audit reader. There is no
controller-manager here, so nothing runs; this is about what helm writes.
"""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.test_chart import BUILD_HELM, CHART, HA_VALUES
from tests.test_manifests import go_tool

from .cluster import ControlPlane

pytestmark = pytest.mark.e2e
RELEASE = "e2e"  # objects are e2e-headroom-*: apart from anything else in the session


@pytest.fixture
def helm(e2e_cluster: ControlPlane, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """helm with this cluster's kubeconfig and its own config/cache dirs under tmp_path."""
    binary = go_tool(BUILD_HELM, timeout=1200)
    env = {
        **os.environ,
        "KUBECONFIG": str(e2e_cluster.kubeconfig),
        **{f"HELM_{d}_HOME": str(tmp_path / d.lower()) for d in ("CONFIG", "CACHE", "DATA")},
    }
    yield binary, env


def run(helm: tuple[str, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    binary, env = helm
    return subprocess.run(
        [binary, *args], capture_output=True, text=True, timeout=180, check=False, env=env
    )


def read(k8s_client: k8s.ApiClient, obj: object) -> dict[str, Any]:
    """An API object as the plain JSON the server sent (typed client models aside)."""
    plain: dict[str, Any] = k8s_client.sanitize_for_serialization(obj)
    return plain


def generated(k8s_client: k8s.ApiClient, ns: str) -> dict[str, str]:
    core = k8s.CoreV1Api(k8s_client)
    tls = read(k8s_client, core.read_namespaced_secret(f"{RELEASE}-headroom-webhook-tls", ns))
    token = read(k8s_client, core.read_namespaced_secret(f"{RELEASE}-headroom-audit-token", ns))
    return {
        "ca": tls["data"]["ca.crt"],
        "crt": tls["data"]["tls.crt"],
        "token": token["data"]["token"],
    }


def ca_bundle(k8s_client: k8s.ApiClient) -> str:
    hooks = k8s.AdmissionregistrationV1Api(k8s_client)
    hook = hooks.read_validating_webhook_configuration(f"{RELEASE}-headroom-pod-guard")
    return str(read(k8s_client, hook)["webhooks"][0]["clientConfig"]["caBundle"])


def test_install_then_upgrade_keeps_certificate_and_token(
    helm: tuple[str, dict[str, str]], k8s_client: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(k8s_client)
    installed = run(helm, "install", RELEASE, str(CHART), "-n", namespace)
    try:
        assert installed.returncode == 0, installed.stderr
        first = generated(k8s_client, namespace)
        assert ca_bundle(k8s_client) == first["ca"]
        assert len(base64.b64decode(first["token"])) >= 32
        apps = k8s.AppsV1Api(k8s_client)
        dep = apps.read_namespaced_deployment(f"{RELEASE}-headroom-scheduler", namespace)
        assert read(k8s_client, dep)["spec"]["replicas"] == 1
        apps.read_namespaced_daemon_set(f"{RELEASE}-headroom-agent", namespace)

        upgraded = run(helm, "upgrade", RELEASE, str(CHART), "-n", namespace)
        assert upgraded.returncode == 0, upgraded.stderr
        assert generated(k8s_client, namespace) == first
        assert ca_bundle(k8s_client) == first["ca"]

        # a value that cannot work is refused before anything changes
        refused = run(
            helm, "upgrade", RELEASE, str(CHART), "-n", namespace, "--set", "scheduler.replicas=2"
        )
        assert refused.returncode != 0
        assert "needs ledger.type postgres" in refused.stderr
    finally:
        removed = run(helm, "uninstall", RELEASE, "-n", namespace)
    assert removed.returncode == 0, removed.stderr
    # the ledger's volume claim outlives the release (resource-policy keep): it is the
    # billing record; everything cluster-wide is gone.
    core.read_namespaced_persistent_volume_claim(f"{RELEASE}-headroom-ledger", namespace)
    roles = k8s.RbacAuthorizationV1Api(k8s_client).list_cluster_role()
    names = {r["metadata"]["name"] for r in read(k8s_client, roles)["items"]}
    assert f"{RELEASE}-headroom-extender" not in names


def test_ha_values_install(
    helm: tuple[str, dict[str, str]], k8s_client: k8s.ApiClient, namespace: str
) -> None:
    """values-postgres-ha.yaml: the API server takes the two-replica objects too."""
    release = "e2e-ha"
    installed = run(helm, "install", release, str(CHART), "-n", namespace, "-f", str(HA_VALUES))
    try:
        assert installed.returncode == 0, installed.stderr
        pdb = k8s.PolicyV1Api(k8s_client).read_namespaced_pod_disruption_budget(
            f"{release}-headroom-scheduler", namespace
        )
        assert read(k8s_client, pdb)["spec"]["minAvailable"] == 1
        peers = k8s.CoreV1Api(k8s_client).read_namespaced_service(
            f"{release}-headroom-extender-peers", namespace
        )
        assert read(k8s_client, peers)["spec"]["clusterIP"] == "None"
        dep = k8s.AppsV1Api(k8s_client).read_namespaced_deployment(
            f"{release}-headroom-scheduler", namespace
        )
        (db,) = [
            e
            for c in read(k8s_client, dep)["spec"]["template"]["spec"]["containers"]
            for e in c.get("env", [])
            if e["name"] == "HEADROOM_DB"
        ]
        assert db["valueFrom"]["secretKeyRef"] == {"name": "headroom-postgres", "key": "dsn"}
    finally:
        removed = run(helm, "uninstall", release, "-n", namespace)
    assert removed.returncode == 0, removed.stderr
