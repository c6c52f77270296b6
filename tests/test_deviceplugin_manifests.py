"""Deploying headroom's device plugin: what the DaemonSet, its RBAC, the chart values and
the Karpenter NodeOverlay example promise, checked against the code they configure.

The plain schema checks and the chart's field-for-field equivalence with
``kustomize build manifests/overlays/device-plugin`` are in tests/test_manifests.py and
tests/test_chart.py; the real API server's server-side dry run of these objects is in
tests/e2e/test_device_plugin_burst.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from drivers.deviceplugin.cli import add_device_plugin_command
from extender.state.demand import GPU_RESOURCE
from extender.state.nodefacts import DEVICE_PLUGIN
from tests.test_chart import helm, render  # noqa: F401 (helm: the session fixture)
from tests.test_manifests import MANIFESTS, built, container, find, kustomize  # noqa: F401

NODEOVERLAYS = MANIFESTS / "examples" / "karpenter-nodeoverlay-gpu-slots.yaml"


def plugin_args(args: list[str]) -> argparse.Namespace:
    """The DaemonSet's args as ``headroom device-plugin`` itself parses them."""
    parser = argparse.ArgumentParser(prog="headroom")
    add_device_plugin_command(parser.add_subparsers(dest="cmd"))
    return parser.parse_args(args)


def plugin_daemonset(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    ds = find(docs, "DaemonSet", "headroom-device-plugin")
    spec = ds["spec"]["template"]["spec"]
    return spec, container(spec, "device-plugin")


@pytest.mark.parametrize("target", ["device-plugin", "overlays/device-plugin"])
def test_daemonset_runs_the_plugin_where_the_extender_waits_for_it(
    kustomize: str,  # noqa: F811
    target: str,
) -> None:
    spec, c = plugin_daemonset(built(kustomize, target))
    args = plugin_args(c["args"])
    assert args.func.__module__ == "drivers.deviceplugin.cli"
    assert (args.node, args.driver, args.in_cluster, args.kubeconfig) == (
        "$(NODE_NAME)",
        "nvml",
        True,
        None,
    )
    assert args.resource == GPU_RESOURCE  # what the extender's demand reads
    node_env = next(e for e in c["env"] if e["name"] == "NODE_NAME")
    assert node_env["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # the label the extender reads (extender/state/nodefacts.py) is the one it runs on
    assert spec["nodeSelector"] == {DEVICE_PLUGIN: "true"}
    assert "affinity" not in spec
    assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
    assert spec["runtimeClassName"] == "nvidia"


def test_the_only_host_path_is_kubelets_device_plugin_directory(kustomize: str) -> None:  # noqa: F811
    spec, c = plugin_daemonset(built(kustomize, "device-plugin"))
    args = plugin_args(c["args"])
    socket_dir = str(Path(args.kubelet_dir) / "device-plugins")
    (volume,) = spec["volumes"]
    assert volume["hostPath"] == {"path": socket_dir, "type": "Directory"}
    (mount,) = c["volumeMounts"]
    assert mount == {"name": volume["name"], "mountPath": socket_dir}
    assert not spec.get("hostPID") and not spec.get("hostNetwork") and not spec.get("hostIPC")
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True and not sc.get("privileged")


def test_rbac_is_list_and_patch_pods_and_nothing_else(kustomize: str) -> None:  # noqa: F811
    docs = built(kustomize, "overlays/device-plugin")
    spec, _ = plugin_daemonset(docs)
    sa = spec["serviceAccountName"]
    find(docs, "ServiceAccount", sa)
    bindings = [
        b
        for b in docs
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s["kind"] == "ServiceAccount" and s["name"] == sa for s in b["subjects"])
    ]
    (binding,) = bindings
    role = find(docs, binding["roleRef"]["kind"], binding["roleRef"]["name"])
    granted = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    # drivers/deviceplugin/pods.py: list_pod_for_all_namespaces, patch_namespaced_pod
    assert granted == {("", "pods", "list"), ("", "pods", "patch")}
    assert spec["automountServiceAccountToken"] is True


def test_the_chart_leaves_the_plugin_out_unless_asked(helm: str) -> None:  # noqa: F811
    names = {(d["kind"], d["metadata"]["name"]) for d in render(helm)}
    assert not any("device-plugin" in n for _, n in names)
    docs = render(
        helm,
        "--set",
        "devicePlugin.enabled=true",
        "--set",
        "devicePlugin.slotsPerGpu=8",
        "--set",
        "devicePlugin.kubeletDir=/var/lib/k0s/kubelet/",
    )
    spec, c = plugin_daemonset(docs)
    args = plugin_args(c["args"])
    assert args.slots_per_gpu == 8 and args.kubelet_dir == "/var/lib/k0s/kubelet"
    (volume,) = spec["volumes"]
    assert volume["hostPath"]["path"] == "/var/lib/k0s/kubelet/device-plugins"


def test_nodeoverlays_advertise_gpus_times_the_daemonsets_slots(kustomize: str) -> None:  # noqa: F811
    _, c = plugin_daemonset(built(kustomize, "device-plugin"))
    slots = plugin_args(c["args"]).slots_per_gpu
    overlays = [d for d in yaml.safe_load_all(NODEOVERLAYS.read_text()) if d]
    assert overlays
    counts = []
    for o in overlays:
        reqs = {r["key"]: r for r in o["spec"]["requirements"]}
        # only where the plugin runs: the NodePool label the DaemonSet selects on
        assert reqs[DEVICE_PLUGIN]["operator"] == "In"
        assert reqs[DEVICE_PLUGIN]["values"] == ["true"]
        (gpus,) = reqs["karpenter.k8s.aws/instance-gpu-count"]["values"]
        assert o["spec"]["capacity"] == {GPU_RESOURCE: str(int(gpus) * slots)}
        counts.append(int(gpus))
    assert len(set(counts)) == len(counts), "one overlay per GPU count"


def test_the_admission_policy_names_the_plugins_own_service_account(helm: str) -> None:  # noqa: F811
    """The policy matches the ServiceAccount the DaemonSet runs as, in any release and
    namespace (what it checks is proved on the real API server in the e2e)."""
    docs = render(helm, "--set", "devicePlugin.enabled=true", release="gpu", namespace="platform")
    spec, _ = plugin_daemonset_named(docs, "gpu-headroom-device-plugin")
    vap = find(docs, "ValidatingAdmissionPolicy")
    (cond,) = vap["spec"]["matchConditions"]
    assert f"'system:serviceaccount:platform:{spec['serviceAccountName']}'" in cond["expression"]
    binding = find(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == vap["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert vap["spec"]["failurePolicy"] == "Fail"


def plugin_daemonset_named(docs: list[dict[str, Any]], name: str) -> tuple[dict[str, Any], Any]:
    ds = find(docs, "DaemonSet", name)
    spec = ds["spec"]["template"]["spec"]
    return spec, container(spec, "device-plugin")
