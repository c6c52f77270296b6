"""The deployment manifests: schemas, scheduler configuration, kustomize builds, dashboard.

* Every Kubernetes object under ``manifests/`` validates, strictly (unknown fields are
  errors), against the OpenAPI schemas that ``kubernetes-validate`` bundles for
  ``K8S_VERSION``; a kind it has no schema for is a failure, not a skip.
* ``KubeSchedulerConfiguration`` is not an API object, so its ``extenders:`` are checked
  against the validation rules in docs/protocol.md §1.9 by ``scheduler_config_errors``.
* Where the e2e suite has built kube-scheduler (tests/e2e/build.sh, cached), that real
  kube-scheduler loads both configurations (strict decoding and its own validation).
* Each kustomization builds with a real kustomize (``tests/tools/build_kustomize.sh``
  builds it from Go modules into a cache outside the checkout), and the built output
  validates too and holds what each variant promises.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from extender.kube.binder import BIND_DEADLINE_S
from extender.settings import Settings
from tests.crd_schemas import NODEOVERLAY_API, nodeoverlay_errors

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "manifests"
BUILD_KUSTOMIZE = ROOT / "tests" / "tools" / "build_kustomize.sh"

# The kube-scheduler image is v1.37.2 (the e2e control plane's version); kubernetes-validate
# bundles schemas up to 1.37. 1.37 has resource.k8s.io/v1 (DeviceClass,
# ResourceClaimTemplate; GA since 1.34).
K8S_VERSION = "1.37"

# Metric names the Grafana dashboard uses, in one place. Each must be exported by the
# code (checked below against extender/ and drivers/), so a rename breaks this test
# rather than leaving an empty panel.
DASHBOARD_METRICS = (
    "headroom_agent_gpu_memory_used_bytes",
    "headroom_agent_pod_gpu_memory_used_bytes",
    "headroom_gpu_memory_granted_bytes",
    "headroom_allocations_active",
    "headroom_chargeback_dollars",
    "headroom_discrepancies_total",
    "headroom_ledger_write_seconds_bucket",
    "headroom_extender_request_duration_seconds_bucket",
    "headroom_node_gpu_headroom_bytes",
    "headroom_node_report_age_seconds",
    "headroom_namespace_grants",
    "headroom_unpriced_nodes",
)

# The deployable variants and the kinds each build must produce (exact counts).
_COMMON = {
    "Namespace": 1,
    "ServiceAccount": 2,
    "ClusterRole": 1,
    "ClusterRoleBinding": 3,
    "Role": 1,
    "RoleBinding": 2,
    "ConfigMap": 2,
    "Deployment": 1,
    "Service": 1,
    "NetworkPolicy": 1,
    "DaemonSet": 1,
    "ValidatingWebhookConfiguration": 1,
}
BUILDS: dict[str, dict[str, int]] = {
    "base": {**_COMMON, "PersistentVolumeClaim": 1},
    "overlays/default-profile": {**_COMMON, "PersistentVolumeClaim": 1},
    "overlays/postgres-ha": {**_COMMON, "PodDisruptionBudget": 1, "Service": 2},
    "overlays/device-plugin": {
        **_COMMON,
        "PersistentVolumeClaim": 1,
        "ServiceAccount": 3,
        "ClusterRole": 2,
        "ClusterRoleBinding": 4,
        "DaemonSet": 2,
        "ValidatingAdmissionPolicy": 1,
        "ValidatingAdmissionPolicyBinding": 1,
    },
    "device-plugin": {
        "ServiceAccount": 1,
        "ClusterRole": 1,
        "ClusterRoleBinding": 1,
        "DaemonSet": 1,
        "ValidatingAdmissionPolicy": 1,
        "ValidatingAdmissionPolicyBinding": 1,
    },
    "examples": {"DeviceClass": 1, "ResourceClaimTemplate": 1, "Pod": 2},
    "scheduler": {"ConfigMap": 1},
    "grafana": {"ConfigMap": 1},
}
EXPECTED_PROFILE = {
    "base": "headroom",
    "overlays/default-profile": "default-scheduler",
    "overlays/postgres-ha": "headroom",
    "overlays/device-plugin": "headroom",
}

SCHEDULER_CONFIG = MANIFESTS / "scheduler" / "kube-scheduler-config.yaml"
DEFAULT_PROFILE_CONFIG = MANIFESTS / "overlays" / "default-profile" / "kube-scheduler-config.yaml"
DASHBOARD = MANIFESTS / "grafana" / "headroom-dashboard.json"


# --------------------------------------------------------------------------- helpers


def load_docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def kustomizations() -> list[Path]:
    return sorted(MANIFESTS.rglob("kustomization.yaml"))


def patch_files() -> set[Path]:
    """Files kustomizations use as patches: partial objects, checked through the builds."""
    found: set[Path] = set()
    for k in kustomizations():
        spec = yaml.safe_load(k.read_text())
        for p in spec.get("patches", []) + spec.get("patchesStrategicMerge", []):
            path = p.get("path") if isinstance(p, dict) else p
            if path:
                found.add((k.parent / path).resolve())
    return found


def yaml_files() -> list[Path]:
    return sorted(MANIFESTS.rglob("*.yaml"))


def object_files() -> list[Path]:
    """YAML files holding whole Kubernetes objects (the rest is listed in the test)."""
    skip = patch_files()
    out = []
    for p in yaml_files():
        if p.name == "kustomization.yaml" or p.resolve() in skip:
            continue
        if any(d.get("kind") == "KubeSchedulerConfiguration" for d in load_docs(p.read_text())):
            continue
        out.append(p)
    return out


def validate(doc: dict[str, Any], where: str) -> None:
    """Strict schema validation; a missing schema fails too (no silent pass). Karpenter's
    NodeOverlay is not a Kubernetes kind: it is checked against its CRD's schema
    (``tests/crd_schemas.py``)."""
    if doc.get("apiVersion") == NODEOVERLAY_API and doc.get("kind") == "NodeOverlay":
        problems = nodeoverlay_errors(doc)
        if problems:
            pytest.fail(f"{where}: NodeOverlay/{doc['metadata'].get('name')}: {problems}")
        return
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(x) for x in e.path)
        pytest.fail(
            f"{where}: {doc['kind']}/{doc['metadata'].get('name')} does not validate "
            f"against Kubernetes {e.version}: {path}: {e.message}"
        )
    except kubernetes_validate.SchemaNotFoundError as e:
        pytest.fail(f"{where}: {e.message}")


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    hits = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, found {len(hits)}"
    return hits[0]


def container(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod_spec["containers"] if c["name"] == name)


def pod_specs(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for d in docs:
        if d["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            yield f"{d['kind']}/{d['metadata']['name']}", d["spec"]["template"]["spec"]


_EXTENDER_FIELDS = {
    "urlPrefix",
    "filterVerb",
    "preemptVerb",
    "prioritizeVerb",
    "weight",
    "bindVerb",
    "enableHTTPS",
    "tlsConfig",
    "httpTimeout",
    "nodeCacheCapable",
    "managedResources",
    "ignorable",
}
_CONFIG_FIELDS = {
    "apiVersion",
    "kind",
    "parallelism",
    "leaderElection",
    "clientConnection",
    "healthzBindAddress",
    "metricsBindAddress",
    "enableProfiling",
    "enableContentionProfiling",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "profiles",
    "extenders",
    "delayCacheUntilActive",
}
_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")


def scheduler_config_errors(cfg: dict[str, Any]) -> list[str]:
    """Rules of kube-scheduler's config validation (docs/protocol.md §1.9) plus headroom's own:
    no managedResources (DRA-only pods must reach the extender), one binder, a filter."""
    errors: list[str] = []
    if cfg.get("apiVersion") != "kubescheduler.config.k8s.io/v1":
        errors.append(f"apiVersion {cfg.get('apiVersion')!r}")
    if cfg.get("kind") != "KubeSchedulerConfiguration":
        errors.append(f"kind {cfg.get('kind')!r}")
    errors += [f"unknown field {k!r}" for k in sorted(set(cfg) - _CONFIG_FIELDS)]
    names = [p.get("schedulerName") for p in cfg.get("profiles") or []]
    if not names or not all(names):
        errors.append("profiles must each have a schedulerName")
    if len(set(names)) != len(names):
        errors.append(f"duplicate profile names {names}")
    extenders = cfg.get("extenders") or []
    if not extenders:
        errors.append("no extenders")
    binders = [e for e in extenders if e.get("bindVerb")]
    if len(binders) > 1:
        errors.append("only one extender can implement bind")
    for i, e in enumerate(extenders):
        where = f"extenders[{i}]"
        errors += [f"{where}: unknown field {k!r}" for k in sorted(set(e) - _EXTENDER_FIELDS)]
        if not e.get("urlPrefix"):
            errors.append(f"{where}: urlPrefix is required")
        if e.get("prioritizeVerb"):
            w = e.get("weight")
            if not isinstance(w, int) or isinstance(w, bool) or w <= 0:
                errors.append(f"{where}: weight must be a positive integer with prioritizeVerb")
        if "managedResources" in e:
            errors.append(f"{where}: managedResources hides DRA-only pods from the extender")
        if not e.get("filterVerb"):
            errors.append(f"{where}: no filterVerb")
        timeout = e.get("httpTimeout")
        if timeout is not None and not _DURATION.match(str(timeout)):
            errors.append(f"{where}: httpTimeout {timeout!r} is not a duration")
        for flag in ("enableHTTPS", "nodeCacheCapable", "ignorable"):
            if flag in e and not isinstance(e[flag], bool):
                errors.append(f"{where}: {flag} must be a boolean")
    return errors


def _flag(args: list[str], name: str) -> str:
    for i, a in enumerate(args):
        if a == name:
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    raise AssertionError(f"{name} not in {args}")


# ----------------------------------------------------------------- files on disk


def test_every_yaml_file_is_accounted_for() -> None:
    """No file under manifests/ escapes validation by not matching a category."""
    objects = set(object_files())
    patches = patch_files()
    configs = {SCHEDULER_CONFIG, DEFAULT_PROFILE_CONFIG}
    for p in yaml_files():
        assert (
            p in objects or p.name == "kustomization.yaml" or p.resolve() in patches or p in configs
        ), f"{p.relative_to(ROOT)} is neither object, patch nor config"
    assert len(objects) >= 12


@pytest.mark.parametrize("path", object_files(), ids=lambda p: str(p.relative_to(MANIFESTS)))
def test_manifest_file_validates(path: Path) -> None:
    docs = load_docs(path.read_text())
    assert docs, f"{path} holds no object"
    for doc in docs:
        validate(doc, str(path.relative_to(ROOT)))


@pytest.mark.parametrize(
    "path", [SCHEDULER_CONFIG, DEFAULT_PROFILE_CONFIG], ids=["scheduler", "default-profile"]
)
def test_scheduler_config_follows_the_extender_rules(path: Path) -> None:
    cfg = yaml.safe_load(path.read_text())
    assert scheduler_config_errors(cfg) == []
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:8888"
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"], ext["preemptVerb"]) == (
        "filter",
        "prioritize",
        "bind",
        "preempt",
    )
    assert ext["weight"] == 5 and ext["nodeCacheCapable"] is True
    assert ext["httpTimeout"] == "10s" and ext["ignorable"] is False
    assert ext["enableHTTPS"] is False
    le = cfg["leaderElection"]
    assert le["leaderElect"] is True
    assert le["resourceNamespace"] == "headroom-system"
    assert le["resourceName"] == "headroom-scheduler"
    # in-cluster config: no kubeconfig path; the scheduler's own client raised past the
    # default 50 QPS that held a backlog to ~50 pods/s (docs/deploy.md)
    assert "kubeconfig" not in cfg["clientConnection"]
    assert cfg["clientConnection"]["qps"] >= 200 and cfg["clientConnection"]["burst"] >= 400
    assert cfg["percentageOfNodesToScore"] == 100  # the extender sees every feasible node
    assert cfg["parallelism"] == 16


@pytest.mark.parametrize(
    "path", [SCHEDULER_CONFIG, DEFAULT_PROFILE_CONFIG], ids=["scheduler", "default-profile"]
)
def test_extender_http_timeout_outlasts_the_bind_worst_case(path: Path) -> None:
    """kube-scheduler abandons an extender call after httpTimeout: the extender must
    answer a bind (its ledger wait, or a retried bind's wait for the first) before that,
    so a change to either default breaks this test before it breaks a cluster."""
    (ext,) = yaml.safe_load(path.read_text())["extenders"]
    timeout_s = float(ext["httpTimeout"].removesuffix("s"))
    defaults = Settings()
    # the ledger write (its deadline) and then the Binding (its API retries)
    assert timeout_s > defaults.ledger_timeout + 0.5 + BIND_DEADLINE_S
    assert timeout_s > defaults.bind_wait  # a retried bind waiting for the first


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: e.update(weight=0), "weight must be a positive integer"),
        (lambda e: e.pop("weight"), "weight must be a positive integer"),
        (lambda e: e.update(managedResources=[{"name": "nvidia.com/gpu"}]), "managedResources"),
        (lambda e: e.update(urlPrefix=""), "urlPrefix is required"),
        (lambda e: e.update(httpTimout="5s"), "unknown field 'httpTimout'"),
        (lambda e: e.update(httpTimeout="5 seconds"), "is not a duration"),
    ],
    ids=["weight-0", "no-weight", "managed", "no-url", "typo", "bad-duration"],
)
def test_scheduler_config_check_catches(change: Any, message: str) -> None:
    cfg = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    change(cfg["extenders"][0])
    assert any(message in e for e in scheduler_config_errors(cfg)), scheduler_config_errors(cfg)


def test_scheduler_config_check_rejects_two_binders() -> None:
    cfg = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    cfg["extenders"].append({**cfg["extenders"][0], "urlPrefix": "http://other:1"})
    assert "only one extender can implement bind" in scheduler_config_errors(cfg)


def _kube_scheduler() -> str | None:
    """kube-scheduler as built by the e2e suite, if it is in the cache (never built here)."""
    if os.environ.get("HEADROOM_KUBE_SCHEDULER"):
        return os.environ["HEADROOM_KUBE_SCHEDULER"]
    cache = Path(os.environ.get("HEADROOM_E2E_CACHE", Path.home() / ".cache" / "headroom-e2e"))
    found = sorted(cache.glob("k8s-v1.37.*/bin/kube-scheduler"))
    return str(found[-1]) if found else None


def _load_with_kube_scheduler(binary: str, cfg: dict[str, Any], tmp: Path) -> tuple[int, str]:
    """`kube-scheduler --write-config-to`: decode strictly, default, validate, write, exit.
    It needs a kubeconfig to get that far (nothing is contacted)."""
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "x",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "unused"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    config = tmp / "config.yaml"
    connection = {**cfg["clientConnection"], "kubeconfig": str(kubeconfig)}
    config.write_text(yaml.safe_dump({**cfg, "clientConnection": connection}))
    out = tmp / "written.yaml"
    proc = subprocess.run(
        [binary, "--config", str(config), "--write-config-to", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, proc.stderr


@pytest.mark.parametrize(
    "path", [SCHEDULER_CONFIG, DEFAULT_PROFILE_CONFIG], ids=["scheduler", "default-profile"]
)
def test_real_kube_scheduler_accepts_the_config(path: Path, tmp_path: Path) -> None:
    binary = _kube_scheduler()
    if binary is None:
        pytest.skip("no kube-scheduler v1.37 in the e2e cache (tests/e2e/build.sh builds it)")
    cfg = yaml.safe_load(path.read_text())
    rc, err = _load_with_kube_scheduler(binary, cfg, tmp_path)
    assert rc == 0, err
    written = yaml.safe_load((tmp_path / "written.yaml").read_text())
    assert written["extenders"] == [
        {k: v for k, v in cfg["extenders"][0].items() if v is not False}
    ]  # false is omitted when written
    assert written["leaderElection"]["resourceName"] == "headroom-scheduler"
    # ... and the same binary refuses what docs/protocol.md §1.9 says it refuses.
    cfg["extenders"][0]["weight"] = 0
    rc, err = _load_with_kube_scheduler(binary, cfg, tmp_path)
    assert rc != 0 and "must have a positive weight" in err, err


def test_e2e_renders_the_deployable_config_changing_only_loopback_fields() -> None:
    """The real kube-scheduler in tests/e2e runs this very file: only the kubeconfig,
    leader election, profile name and URL change, never the extender's behaviour."""
    from tests.e2e.cluster import render_scheduler_config

    rendered = yaml.safe_load(render_scheduler_config(Path("/k"), "http://127.0.0.1:9"))
    (ext,) = rendered["extenders"]
    (ours,) = yaml.safe_load(SCHEDULER_CONFIG.read_text())["extenders"]
    assert {**ours, "urlPrefix": "http://127.0.0.1:9"} == ext
    assert "managedResources" not in ext


def test_default_profile_differs_only_in_the_profile_name() -> None:
    base = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    overlay = yaml.safe_load(DEFAULT_PROFILE_CONFIG.read_text())
    assert [p["schedulerName"] for p in base["profiles"]] == ["headroom"]
    assert [p["schedulerName"] for p in overlay["profiles"]] == ["default-scheduler"]
    base["profiles"] = overlay["profiles"] = None
    assert base == overlay


def test_dashboard_uses_the_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {m for e in exprs for m in re.findall(r"\bheadroom_[a-z0-9_]+", e)}
    used |= set(re.findall(r"\bheadroom_[a-z0-9_]+", json.dumps(dashboard["templating"])))
    assert used == set(DASHBOARD_METRICS)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    source = "\n".join(
        p.read_text() for d in ("extender", "drivers") for p in (ROOT / d).rglob("*.py")
    )
    for metric in DASHBOARD_METRICS:
        family = re.sub(r"_(total|bucket|count|sum)$", "", metric)
        assert f'"{family}"' in source, f"{family} is not exported by extender/ or drivers/"


# ------------------------------------------------------------------- kustomize


def go_tool(script: Path, timeout: float = 600) -> str:
    """A tool built from Go modules by one of tests/tools/build_*.sh (cached outside the
    checkout): its path. Skips only where it is not cached and there is no Go to build it."""
    where = script.relative_to(ROOT)
    try:
        proc = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{where} timed out after {e.timeout} s")
    if proc.returncode != 0:
        if shutil.which("go") is None:
            pytest.skip(f"{where}: not cached and no Go toolchain: {proc.stderr.strip()}")
        pytest.fail(f"{where} failed:\n{proc.stderr}")
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def kustomize() -> str:
    """kustomize built from Go modules (cached outside the checkout)."""
    return go_tool(BUILD_KUSTOMIZE)


@cache
def _build(binary: str, target: str) -> str:
    proc = subprocess.run(
        [binary, "build", str(MANIFESTS / target)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"kustomize build manifests/{target}:\n{proc.stderr}"
    return proc.stdout


def built(kustomize: str, target: str) -> list[dict[str, Any]]:
    return load_docs(_build(kustomize, target))


@pytest.mark.parametrize("target", list(BUILDS))
def test_kustomize_build(kustomize: str, target: str) -> None:
    docs = built(kustomize, target)
    assert Counter(d["kind"] for d in docs) == Counter(BUILDS[target])
    for doc in docs:
        validate(doc, f"kustomize build manifests/{target}")


@pytest.mark.parametrize("target", list(EXPECTED_PROFILE))
def test_built_scheduler_wiring(kustomize: str, target: str) -> None:
    docs = built(kustomize, target)
    dep = find(docs, "Deployment", "headroom-scheduler")
    spec = dep["spec"]["template"]["spec"]
    sched, ext = container(spec, "kube-scheduler"), container(spec, "extender")
    assert sched["image"] == "registry.k8s.io/kube-scheduler:v1.37.2"

    # --config points at the key of the mounted (hash-named) ConfigMap ...
    config_path = Path(_flag(sched["command"], "--config"))
    mount = next(m for m in sched["volumeMounts"] if m["mountPath"] == str(config_path.parent))
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    cm = find(docs, "ConfigMap", volume["configMap"]["name"])
    cfg = yaml.safe_load(cm["data"][config_path.name])
    # ... which carries a valid configuration with this variant's profile ...
    assert scheduler_config_errors(cfg) == []
    assert [p["schedulerName"] for p in cfg["profiles"]] == [EXPECTED_PROFILE[target]]
    # ... whose extender URL is where the sidecar listens.
    (extender,) = cfg["extenders"]
    assert extender["urlPrefix"] == f"http://127.0.0.1:{_flag(ext['args'], '--port')}"
    assert ext["args"][0] == "serve"
    assert any(p["containerPort"] == 8888 for p in ext["ports"])
    probes = {ext["readinessProbe"]["httpGet"]["path"], ext["livenessProbe"]["httpGet"]["path"]}
    assert probes == {"/readyz", "/healthz"}

    svc = find(docs, "Service", "headroom-extender")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["port"]: p["targetPort"] for p in svc["spec"]["ports"]}
    named = {p["name"]: p["containerPort"] for p in ext["ports"]}
    assert named[ports[8888]] == 8888 and named[ports[8443]] == 8443

    hook = find(docs, "ValidatingWebhookConfiguration")["webhooks"][0]
    ref = hook["clientConfig"]["service"]
    assert (ref["name"], ref["namespace"], ref["port"], ref["path"]) == (
        "headroom-extender",
        "headroom-system",
        8443,
        "/admit/pods",
    )
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
    excluded = hook["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn"
    assert {"kube-system", "headroom-system"} <= set(excluded["values"])
    tls = next(v for v in spec["volumes"] if v["name"] == "webhook-tls")
    assert tls["secret"]["secretName"] == "headroom-webhook-tls"
    # the audit API needs a credential by default: its token file, from a Secret
    env = {e["name"]: e.get("value") for e in ext["env"]}
    audit = Path(env["HEADROOM_AUDIT_TOKEN_FILE"])
    mount = next(m for m in ext["volumeMounts"] if m["mountPath"] == str(audit.parent))
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "headroom-audit-token"
    assert "HEADROOM_SCHEDULER_VERBS" not in env  # the default: loopback only

    # RBAC: the pod's ServiceAccount carries the scheduler roles and the extender's role.
    sa = spec["serviceAccountName"]
    bound = {
        b["roleRef"]["name"]
        for b in docs
        if b["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(s["name"] == sa and s["namespace"] == "headroom-system" for s in b["subjects"])
    }
    assert {
        "system:kube-scheduler",
        "system:volume-scheduler",
        "headroom-extender",
        "extension-apiserver-authentication-reader",
        "headroom-scheduler-leader-election",
    } <= bound
    reader = find(
        docs, "RoleBinding", "headroom-scheduler-extension-apiserver-authentication-reader"
    )
    assert reader["metadata"]["namespace"] == "kube-system"
    lease = find(docs, "Role", "headroom-scheduler-leader-election")
    assert any(
        cfg["leaderElection"]["resourceName"] in r.get("resourceNames", []) for r in lease["rules"]
    )
    rules = find(docs, "ClusterRole", "headroom-extender")["rules"]
    granted = {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert {
        ("", "pods", "patch"),
        ("", "pods/binding", "create"),
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("resource.k8s.io", "resourceclaims", "watch"),
        ("karpenter.sh", "nodeclaims", "list"),
    } <= granted
    assert not any("*" in (g, r, v) for g, r, v in granted)


def test_base_is_one_replica_on_sqlite(kustomize: str) -> None:
    docs = built(kustomize, "base")
    dep = find(docs, "Deployment", "headroom-scheduler")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    spec = dep["spec"]["template"]["spec"]
    env = {e["name"]: e for e in container(spec, "extender")["env"]}
    db = env["HEADROOM_DB"]["value"]
    mount = next(m for m in container(spec, "extender")["volumeMounts"] if m["name"] == "data")
    assert db.startswith(mount["mountPath"] + "/")
    volume = next(v for v in spec["volumes"] if v["name"] == "data")
    find(docs, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])


def test_postgres_ha_overlay(kustomize: str) -> None:
    docs = built(kustomize, "overlays/postgres-ha")
    dep = find(docs, "Deployment", "headroom-scheduler")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    spec = dep["spec"]["template"]["spec"]
    ext = container(spec, "extender")
    (db,) = [e for e in ext["env"] if e["name"] == "HEADROOM_DB"]
    assert db == {
        "name": "HEADROOM_DB",
        "valueFrom": {"secretKeyRef": {"name": "headroom-postgres", "key": "dsn"}},
    }
    assert "data" not in {v["name"] for v in spec["volumes"]}
    assert "data" not in {m["name"] for m in ext["volumeMounts"]}
    pdb = find(docs, "PodDisruptionBudget", "headroom-scheduler")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= (
        dep["spec"]["template"]["metadata"]["labels"].items()
    )


@pytest.mark.parametrize("target", list(EXPECTED_PROFILE))
def test_built_agent_daemonset(kustomize: str, target: str) -> None:
    docs = built(kustomize, target)
    ds = find(docs, "DaemonSet", "headroom-agent")
    spec = ds["spec"]["template"]["spec"]
    agent = container(spec, "agent")
    args = agent["args"]
    assert args[:3] == ["agent", "--driver", "nvml"]
    assert _flag(args, "--node") == "$(NODE_NAME)"
    node_env = next(e for e in agent["env"] if e["name"] == "NODE_NAME")
    assert node_env["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # with two replicas (postgres-ha) agents must reach every one: a headless Service
    ha = target == "overlays/postgres-ha"
    svc = find(docs, "Service", "headroom-extender-peers" if ha else "headroom-extender")
    assert (svc["spec"].get("clusterIP") == "None") is ha
    assert _flag(args, "--extender") == (
        f"http://{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc:8888"
    )
    assert spec["hostPID"] is True and spec["runtimeClassName"] == "nvidia"
    assert _flag(args, "--metrics-port") == "9400"
    assert any(p["containerPort"] == 9400 for p in agent["ports"])

    proc = next(v for v in spec["volumes"] if v.get("hostPath", {}).get("path") == "/proc")
    mount = next(m for m in agent["volumeMounts"] if m["name"] == proc["name"])
    assert mount["readOnly"] is True and mount["mountPath"] == "/host/proc"
    assert _flag(args, "--proc-root") == "/host/proc"

    token_path = Path(_flag(args, "--token-file"))
    mount = next(m for m in agent["volumeMounts"] if m["mountPath"] == str(token_path.parent))
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    (source,) = volume["projected"]["sources"]
    assert source["serviceAccountToken"] == {
        "audience": "headroom",
        "expirationSeconds": 3600,
        "path": token_path.name,
    }
    assert spec["automountServiceAccountToken"] is False
    sa = spec["serviceAccountName"]
    assert not [
        b
        for b in docs
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s["name"] == sa for s in b["subjects"])
    ], "the agent needs no RBAC"

    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
    assert keys == {"nvidia.com/gpu.present", "karpenter.k8s.aws/instance-gpu-count"}
    assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])


@pytest.mark.parametrize("target", [*EXPECTED_PROFILE, "examples"])
def test_built_pods_are_locked_down(kustomize: str, target: str) -> None:
    docs = built(kustomize, target)
    pods = list(pod_specs(docs)) + [
        (f"Pod/{d['metadata']['name']}", d["spec"]) for d in docs if d["kind"] == "Pod"
    ]
    assert pods
    for where, spec in pods:
        psc = spec.get("securityContext", {})
        if where in ("DaemonSet/headroom-device-plugin", "DaemonSet/headroom-agent"):
            # root, for the sockets in kubelet's root-owned directories (device plugins,
            # pod-resources), and nothing more: every capability dropped below
            assert psc.get("runAsUser") == 0 and psc.get("runAsNonRoot") is False, where
        else:
            assert psc.get("runAsNonRoot") is True, where
        assert psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
        assert not spec.get("hostNetwork"), where
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c.get("securityContext", {})
            assert sc.get("allowPrivilegeEscalation") is False, (where, c["name"])
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], (where, c["name"])
            assert not sc.get("privileged"), (where, c["name"])
            assert not sc.get("capabilities", {}).get("add"), (where, c["name"])
            if target != "examples":
                assert sc.get("readOnlyRootFilesystem") is True, (where, c["name"])
                res = c.get("resources", {})
                assert res.get("requests") and res.get("limits"), (where, c["name"])


def test_examples_opt_in_to_headroom(kustomize: str) -> None:
    docs = built(kustomize, "examples")
    dc = find(docs, "DeviceClass")
    expr = dc["spec"]["selectors"][0]["cel"]["expression"]
    assert "device.driver == 'gpu.nvidia.com'" in expr
    assert "device.attributes['gpu.nvidia.com'].type == 'gpu'" in expr
    rct = find(docs, "ResourceClaimTemplate")
    (request,) = rct["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == dc["metadata"]["name"]
    assert (
        "device.capacity['gpu.nvidia.com'].memory"
        in (request["exactly"]["selectors"][0]["cel"]["expression"])
    )
    pods = [d for d in docs if d["kind"] == "Pod"]
    assert all(p["spec"]["schedulerName"] == "headroom" for p in pods)
    claims = [p for p in pods if p["spec"].get("resourceClaims")]
    assert (
        claims[0]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
        == (rct["metadata"]["name"])
    )
    annotated = [p for p in pods if p["metadata"].get("annotations")]
    assert annotated[0]["metadata"]["annotations"]["headroom.dev/gpu-memory"] == "20Gi"


def test_dashboard_configmap(kustomize: str) -> None:
    cm = find(built(kustomize, "base"), "ConfigMap", "headroom-grafana-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"][DASHBOARD.name]) == json.loads(DASHBOARD.read_text())
