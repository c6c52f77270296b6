"""The Helm chart ``charts/headroom``: lints, renders valid objects, and deploys what the
kustomize tree deploys.

* helm is built from Go modules (``tests/tools/build_helm.sh``, pinned, cached outside
  the checkout, like kustomize); every render is a real ``helm template``.
* Every rendered object validates strictly against the Kubernetes ``K8S_VERSION`` schemas
  with the same validator as ``tests/test_manifests.py``.
* Equivalence: the chart, with the values that stand for each kustomize variant, renders
  the same objects (kinds, names, namespaces) with the same content as ``kustomize build``
  of that variant, field for field. Only what is Helm's own is set aside: its
  bookkeeping labels and annotations, the config checksum that replaces kustomize's
  name hash, and the scheduler configuration's comments.
* What only the chart does is checked by what a user relies on: the generated webhook
  certificate really serves TLS for the Service name the API server dials, and is the CA
  in caBundle; the audit token Secret is the one the extender mounts; another release
  name keeps every cross-reference (Lease, ServiceAccounts, Services) consistent; bad
  combinations fail with a message that says what to change.
"""

from __future__ import annotations

import base64
import copy
import re
import socket
import ssl
import subprocess
import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_manifests import (
    BUILD_KUSTOMIZE,
    K8S_VERSION,
    ROOT,
    built,
    container,
    find,
    go_tool,
    load_docs,
    scheduler_config_errors,
    validate,
)

CHART = ROOT / "charts" / "headroom"
HA_VALUES = CHART / "values-postgres-ha.yaml"
BUILD_HELM = ROOT / "tests" / "tools" / "build_helm.sh"
NAMESPACE = "headroom-system"

# The chart values that stand for the kustomize base: it renders its Namespace, leaves
# the webhook certificate to cert-manager (the base's annotation) and the audit token
# Secret to the operator, as the base does.
AS_KUSTOMIZE = [
    "--set",
    "namespace.create=true",
    "--set",
    "webhook.certificate.source=certManager",
    "--set",
    "auditToken.create=false",
]
EQUIVALENT = {
    "base": AS_KUSTOMIZE,
    "overlays/default-profile": [*AS_KUSTOMIZE, "--set", "scheduler.profileName=default-scheduler"],
    "overlays/postgres-ha": [*AS_KUSTOMIZE, "-f", str(HA_VALUES)],
    "overlays/device-plugin": [*AS_KUSTOMIZE, "--set", "devicePlugin.enabled=true"],
}
VARIANTS = {
    "defaults": [],
    "postgres-ha": ["-f", str(HA_VALUES)],
    "secret-cert": ["--set", "webhook.certificate.source=secret"],
    "postgres-dsn": [
        "--set",
        "ledger.type=postgres",
        "--set",
        "ledger.postgres.dsn=postgresql://h:p@db:5432/headroom",
    ],
    **{f"as-{k}": v for k, v in EQUIVALENT.items()},
}
# Helm's own labels and annotations: bookkeeping, not behaviour.
HELM_KEYS = {
    "helm.sh/chart",
    "helm.sh/resource-policy",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "checksum/scheduler-config",
}
SCHEDULER_CM = re.compile(r"^(?P<base>.+-scheduler-config)-[a-z0-9]{10}$")


@pytest.fixture(scope="session")
def helm() -> str:
    """helm built from Go modules (cached outside the checkout)."""
    return go_tool(BUILD_HELM, timeout=1200)


@pytest.fixture(scope="session")
def kustomize() -> str:
    return go_tool(BUILD_KUSTOMIZE)


def helm_run(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, *args], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )


def render(
    helm: str, *values: str, release: str = "headroom", namespace: str = NAMESPACE
) -> list[dict[str, Any]]:
    proc = helm_run(
        helm,
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        K8S_VERSION,
        *values,
    )
    assert proc.returncode == 0, f"helm template {' '.join(values)}:\n{proc.stderr}"
    return load_docs(proc.stdout)


def key(doc: dict[str, Any]) -> tuple[str, str | None, str]:
    return doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"]


def normalized(docs: list[dict[str, Any]]) -> dict[tuple[str, str | None, str], Any]:
    """Objects by (kind, namespace, name), without Helm's bookkeeping and kustomize's name
    hash, the scheduler configuration parsed (comments are not behaviour)."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: strip(v) for k, v in node.items() if k not in HELM_KEYS}
            return {k: v for k, v in out.items() if not (k == "annotations" and v == {})}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    out = {}
    for doc in copy.deepcopy(docs):
        if doc["kind"] == "ConfigMap" and (m := SCHEDULER_CM.match(doc["metadata"]["name"])):
            doc["metadata"]["name"] = m["base"]
        if doc["kind"] == "ConfigMap" and "config.yaml" in doc.get("data", {}):
            doc["data"]["config.yaml"] = yaml.safe_load(doc["data"]["config.yaml"])
        if doc["kind"] in ("Deployment", "DaemonSet"):
            pod = doc["spec"]["template"]["spec"]
            for v in pod["volumes"]:
                if "configMap" in v and (m := SCHEDULER_CM.match(v["configMap"]["name"])):
                    v["configMap"]["name"] = m["base"]
            # by name: a strategic-merge patch moves the container it patches to the front
            pod["containers"] = {c["name"]: c for c in pod["containers"]}
        out[key(doc)] = strip(doc)
    return out


def differences(got: Any, want: Any, path: str = "") -> list[str]:
    """Where two objects differ, as `path: chart ... != kustomize ...` lines."""
    if isinstance(got, dict) and isinstance(want, dict):
        return [
            line
            for k in sorted(set(got) | set(want))
            for line in differences(got.get(k, "<absent>"), want.get(k, "<absent>"), f"{path}.{k}")
        ]
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        return [
            line
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for line in differences(g, w, f"{path}[{i}]")
        ]
    return [] if got == want else [f"{path}: chart {got!r} != kustomize {want!r}"]


# ----------------------------------------------------------------------- chart files


def test_chart_follows_the_project_version() -> None:
    """The image tag a plain install deploys is the project's release, as in kustomize."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    kustomization = yaml.safe_load((ROOT / "manifests" / "base" / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == project == image["newTag"]


def test_chart_files_are_the_kustomize_files() -> None:
    """One definition: the scheduler configuration and the dashboard are links to
    manifests/, which helm follows, not copies that can drift."""
    for name, target in [
        ("kube-scheduler-config.yaml", "manifests/scheduler/kube-scheduler-config.yaml"),
        ("headroom-dashboard.json", "manifests/grafana/headroom-dashboard.json"),
    ]:
        link = CHART / "files" / name
        assert link.is_symlink(), f"{link.relative_to(ROOT)} must link to {target}"
        assert link.resolve() == (ROOT / target).resolve()


# ------------------------------------------------------------------------ helm itself


@pytest.mark.parametrize("values", [[], ["-f", str(HA_VALUES)]], ids=["defaults", "postgres-ha"])
def test_helm_lint(helm: str, values: list[str]) -> None:
    proc = helm_run(helm, "lint", "--strict", "--kube-version", K8S_VERSION, str(CHART), *values)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_rendered_object_validates(helm: str, variant: str) -> None:
    docs = render(helm, *VARIANTS[variant])
    assert len({key(d) for d in docs}) == len(docs), "two objects with one name"
    for doc in docs:
        validate(doc, f"helm template ({variant})")
    cm = find(docs, "ConfigMap", "headroom-scheduler-config")
    assert scheduler_config_errors(yaml.safe_load(cm["data"]["config.yaml"])) == []


@pytest.mark.parametrize("target", list(EQUIVALENT))
def test_chart_deploys_what_kustomize_deploys(helm: str, kustomize: str, target: str) -> None:
    chart = normalized(render(helm, *EQUIVALENT[target]))
    kust = normalized(built(kustomize, target))
    assert sorted(chart, key=str) == sorted(kust, key=str), "kinds, names or namespaces differ"
    for k, expected in kust.items():
        diff = differences(chart[k], expected)
        assert not diff, f"{k} differs from kustomize build manifests/{target}:\n" + "\n".join(diff)


# --------------------------------------------------------- what only the chart does


def _serve_once(cert: Path, key_file: Path) -> tuple[int, threading.Thread]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key_file)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            try:
                with ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError):
                conn.close()  # the client refused us: its side of the test says so

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return port, thread


def _handshake(port: int, ca_pem: str, host: str) -> bytes:
    ctx = ssl.create_default_context(cadata=ca_pem)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=host) as tls,
    ):
        return tls.recv(2)


def test_generated_certificate_serves_the_webhook(helm: str, tmp_path: Path) -> None:
    """The default install's Secret holds a key pair that serves TLS for the name the API
    server dials (service.namespace.svc), signed by exactly the CA in caBundle."""
    docs = render(helm)
    hook = find(docs, "ValidatingWebhookConfiguration", "headroom-pod-guard")["webhooks"][0]
    svc = hook["clientConfig"]["service"]
    dep = find(docs, "Deployment", "headroom-scheduler")["spec"]["template"]["spec"]
    volume = next(v for v in dep["volumes"] if v["name"] == "webhook-tls")
    secret = find(docs, "Secret", volume["secret"]["secretName"])
    assert secret["type"] == "kubernetes.io/tls"
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    ca_bundle = base64.b64decode(hook["clientConfig"]["caBundle"]).decode()
    assert ca_bundle == data["ca.crt"]
    env = {e["name"]: e.get("value") for e in container(dep, "extender")["env"]}
    assert Path(env["HEADROOM_TLS_CERT_FILE"]).name == "tls.crt"
    assert Path(env["HEADROOM_TLS_KEY_FILE"]).name == "tls.key"
    (tmp_path / "tls.crt").write_text(data["tls.crt"])
    (tmp_path / "tls.key").write_text(data["tls.key"])

    host = f"{svc['name']}.{svc['namespace']}.svc"
    port, thread = _serve_once(tmp_path / "tls.crt", tmp_path / "tls.key")
    assert _handshake(port, ca_bundle, host) == b"ok"
    thread.join(10)
    # ... and only for that name: the client refuses it for another.
    port, thread = _serve_once(tmp_path / "tls.crt", tmp_path / "tls.key")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(port, ca_bundle, "elsewhere.headroom-system.svc")
    thread.join(10)
    assert "cert-manager.io/inject-ca-from" not in find(docs, "ValidatingWebhookConfiguration")[
        "metadata"
    ].get("annotations", {})


def test_user_certificate_secret_and_ca(helm: str) -> None:
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n...").decode()
    docs = render(
        helm,
        "--set",
        "webhook.certificate.source=secret",
        "--set",
        "webhook.certificate.secretName=my-tls",
        "--set",
        f"webhook.certificate.caBundle={ca}",
    )
    assert not [d for d in docs if d["kind"] == "Secret" and "tls" in d["metadata"]["name"]]
    hook = find(docs, "ValidatingWebhookConfiguration")["webhooks"][0]
    assert hook["clientConfig"]["caBundle"] == ca
    dep = find(docs, "Deployment")["spec"]["template"]["spec"]
    assert next(v for v in dep["volumes"] if v["name"] == "webhook-tls")["secret"] == {
        "secretName": "my-tls",
        "optional": True,
        "defaultMode": 0o440,
    }


def test_audit_token_secret_is_the_one_mounted(helm: str) -> None:
    def token(docs: list[dict[str, Any]]) -> str:
        dep = find(docs, "Deployment")["spec"]["template"]["spec"]
        volume = next(v for v in dep["volumes"] if v["name"] == "audit-token")
        secret = find(docs, "Secret", volume["secret"]["secretName"])
        return base64.b64decode(secret["data"]["token"]).decode()

    generated = token(render(helm))
    assert len(generated) >= 32 and generated.isalnum()
    assert token(render(helm, "--set", "auditToken.value=s3cret-token")) == "s3cret-token"


def test_another_release_keeps_every_reference(helm: str) -> None:
    """Release `gpu` in namespace `gpu-system`: every name is prefixed, and what refers to
    what (Lease and its Role, ServiceAccounts, Services, Secrets) still meets."""
    docs = render(helm, "-f", str(HA_VALUES), release="gpu", namespace="gpu-system")
    for d in docs:
        assert d["metadata"]["name"].startswith("gpu-headroom-"), key(d)
        assert d["metadata"].get("namespace") in (None, "gpu-system", "kube-system"), key(d)
    dep = find(docs, "Deployment")["spec"]["template"]["spec"]
    mounted = {v["name"]: v for v in dep["volumes"]}
    cm = find(docs, "ConfigMap", mounted["scheduler-config"]["configMap"]["name"])
    for volume in ("webhook-tls", "audit-token"):
        find(docs, "Secret", mounted[volume]["secret"]["secretName"])
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    lease = cfg["leaderElection"]
    assert (lease["resourceNamespace"], lease["resourceName"]) == (
        "gpu-system",
        "gpu-headroom-scheduler",
    )
    role = find(docs, "Role", "gpu-headroom-scheduler-leader-election")
    assert role["metadata"]["namespace"] == "gpu-system"
    assert any(lease["resourceName"] in r.get("resourceNames", []) for r in role["rules"])

    ds = find(docs, "DaemonSet")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in container(dep, "extender")["env"]}
    assert env["HEADROOM_AGENT_SERVICE_ACCOUNT"] == f"gpu-system:{ds['serviceAccountName']}"
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    assert {dep["serviceAccountName"], ds["serviceAccountName"]} == accounts
    for b in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": dep["serviceAccountName"], "namespace": "gpu-system"}
        ]
    peers = find(docs, "Service", "gpu-headroom-extender-peers")
    args = container(ds, "agent")["args"]
    assert (
        args[args.index("--extender") + 1]
        == "http://gpu-headroom-extender-peers.gpu-system.svc:8888"
    )
    assert peers["spec"]["clusterIP"] == "None"
    hook = find(docs, "ValidatingWebhookConfiguration")["webhooks"][0]
    assert hook["clientConfig"]["service"]["name"] == "gpu-headroom-extender"
    assert hook["clientConfig"]["service"]["namespace"] == "gpu-system"
    excluded = hook["namespaceSelector"]["matchExpressions"][0]["values"]
    assert {"kube-system", "gpu-system"} <= set(excluded)
    pdb = find(docs, "PodDisruptionBudget")
    labels = find(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "scheduler.replicas=2"], "scheduler.replicas > 1 needs ledger.type postgres"),
        (["--set", "ledger.type=mysql"], 'ledger.type must be sqlite or postgres, not "mysql"'),
        (["--set", "scheduler.replicas=0"], "scheduler.replicas must be at least 1"),
        (
            ["--set", "webhook.certificate.source=vault"],
            "webhook.certificate.source must be generate, secret or certManager",
        ),
    ],
    ids=["sqlite-2-replicas", "ledger-type", "no-replicas", "cert-source"],
)
def test_impossible_values_fail_with_a_reason(helm: str, values: list[str], message: str) -> None:
    proc = helm_run(helm, "template", "headroom", str(CHART), "-n", NAMESPACE, *values)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
