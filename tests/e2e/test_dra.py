"""DRA end to end: ``headroom claim`` objects accepted by the real apiserver, the real
scheduler allocates, and the ledger records exactly what ``status.allocation`` says."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from extender.dra.kquantity import quantity_mib_ceil
from extender.dra.template import device_class

from .dra_support import (
    DRIVER,
    claim_from,
    claim_pod,
    headroom_claim,
    nvidia_slice,
    raw,
    wait_for,
)
from .headroom_proc import Headroom
from .test_scheduling import wait_unschedulable

pytestmark = pytest.mark.e2e


def test_dra_allocation_is_recorded_as_status_allocation_says(
    k8s_client: k8s.ApiClient,
    kube_scheduler: Any,
    headroom: Headroom,
    make_node: Any,
    namespace: str,
) -> None:
    core: Any = k8s.CoreV1Api(k8s_client)
    res: Any = k8s.ResourceV1Api(k8s_client)
    nodes = [
        make_node(f"dra-{s}", gpus=0, capacity_type=s, instance_type="g5.12xlarge")
        for s in ("spot", "on-demand")
    ]
    for node in nodes:
        driver = headroom.agent(node, "4xA10G:24Gi")
        res.create_resource_slice(nvidia_slice(node, driver.gpu_uuids))
    template, device_class = headroom_claim("--memory", "20Gi", "--device-class")
    res.create_device_class(device_class)
    # the template is accepted by the real apiserver as headroom claim wrote it
    res.create_namespaced_resource_claim_template(namespace, template)
    # no kube-controller-manager here to stamp claims from templates: make the claim
    # from the template's own spec, as the controller would
    claim = {
        "metadata": {"name": "train-gpu", **template["spec"].get("metadata", {})},
        "spec": template["spec"]["spec"],
    }
    res.create_namespaced_resource_claim(namespace, claim)
    kube_scheduler(headroom.url)
    try:
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": "dra-train", "labels": {"team": "research"}},
                "spec": {
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "train-gpu"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"claims": [{"name": "gpu"}]},
                        }
                    ],
                },
            },
        )
        deadline = time.monotonic() + 60
        rows: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not rows:
            pod = core.read_namespaced_pod("dra-train", namespace)
            if pod.spec.node_name:
                rows = headroom.allocations(pod=pod.metadata.uid)
            time.sleep(0.3)
        assert rows, f"no ledger row for the DRA pod; pod node={pod.spec.node_name}"
        allocated = res.read_namespaced_resource_claim("train-gpu", namespace).status
        (result,) = allocated.allocation.devices.results
        (row,) = rows
        live = res.read_resource_slice(f"{result.pool}-{DRIVER}")
        device = next(d for d in live.spec.devices if d.name == result.device)
        assert row["node"] == pod.spec.node_name == result.pool
        assert row["dra_device"] == f"{result.driver}/{result.pool}/{result.device}"
        assert row["gpu_uuid"] == device.attributes["uuid"].string
        assert row["sharing"] == "dra" and row["claim"] == f"{namespace}/train-gpu"
        assert row["memory_mib"] == 24576  # a whole device: no consumedCapacity
        assert row["status"] == "bound" and row["labels"] == {"team": "research"}
    finally:
        core.delete_namespaced_pod("dra-train", namespace, grace_period_seconds=0)
        res.delete_namespaced_resource_claim("train-gpu", namespace)
        for node in nodes:
            res.delete_resource_slice(f"{node}-{DRIVER}")
        res.delete_device_class(DRIVER)


def _bound_rows(core: Any, headroom: Headroom, ns: str, name: str) -> tuple[Any, list[dict]]:
    """Once the pod is bound and the ledger has recorded its claim: (pod, its rows)."""

    def probe() -> tuple[Any, list[dict]] | None:
        pod = core.read_namespaced_pod(name, ns)
        rows = headroom.allocations(pod=pod.metadata.uid) if pod.spec.node_name else []
        return (pod, rows) if rows else None

    found: tuple[Any, list[dict]] = wait_for(f"pod {ns}/{name} bound and ledgered", probe)
    return found


def _shareable_node(
    res: Any, make_node: Any, headroom: Any, name: str, itype: str, spec: str
) -> tuple[str, Any]:
    """An on-demand ``itype`` node whose agent reports ``spec`` and whose ResourceSlice
    publishes those GPUs as shareable (memory capacity, allowMultipleAllocations), with
    headroom's DeviceClass: the node's name and its simulated driver."""
    node = make_node(name, gpus=0, capacity_type="on-demand", instance_type=itype)
    driver = headroom.agent(node, spec)
    res.create_resource_slice(nvidia_slice(node, driver.gpu_uuids, shareable=True))
    res.create_device_class(headroom_claim("--memory", "1Gi", "--device-class")[1])
    return node, driver


def _shared_pod(res: Any, core: Any, ns: str, name: str, memory: str) -> None:
    (template,) = headroom_claim("--memory", memory, "--shared")
    res.create_namespaced_resource_claim(ns, claim_from(template, f"{name}-gpu"))
    core.create_namespaced_pod(ns, claim_pod(name, f"{name}-gpu"))


def test_shared_claims_share_a_24gi_gpu_only_where_they_fit(
    k8s_client: k8s.ApiClient,
    kube_scheduler: Any,
    headroom: Headroom,
    make_node: Any,
    namespace: str,
) -> None:
    """10, 10 and 20 GiB shares of two shareable 24 GiB GPUs: kube-scheduler puts both
    10s on one GPU (4 GiB left) and the 20 on the other; every ledger row is what
    ``consumedCapacity`` says, named by its share."""
    core: Any = k8s.CoreV1Api(k8s_client)
    res: Any = k8s.ResourceV1Api(k8s_client)
    node, driver = _shareable_node(
        res, make_node, headroom, "dra-share", "g5.12xlarge", "2xA10G:24Gi"
    )
    kube_scheduler(headroom.url)
    try:
        rows: dict[str, dict[str, Any]] = {}
        for name, memory in [("share-a", "10Gi"), ("share-b", "10Gi"), ("share-c", "20Gi")]:
            _shared_pod(res, core, namespace, name, memory)  # one at a time: first fit
            _, (rows[name],) = _bound_rows(core, headroom, namespace, name)
        results = {}
        for name, row in rows.items():
            claim = raw(res.read_namespaced_resource_claim_with_http_info, f"{name}-gpu", namespace)
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            results[name] = result
            assert row["memory_mib"] == quantity_mib_ceil(result["consumedCapacity"]["memory"])
            assert row["dra_device"] == f"{DRIVER}/{node}/{result['device']}/{result['shareID']}"
            assert row["gpu_uuid"] == driver.gpu_uuids[int(result["device"].split("-")[1])]
            assert row["sharing"] == "dra" and row["claim"] == f"{namespace}/{name}-gpu"
        assert [rows[n]["memory_mib"] for n in ("share-a", "share-b", "share-c")] == [
            10240,
            10240,
            20480,
        ]
        assert results["share-a"]["device"] == results["share-b"]["device"]
        assert results["share-c"]["device"] != results["share-a"]["device"]
        assert len({r["shareID"] for r in results.values()}) == 3
        per_gpu: dict[str, int] = {}
        for row in rows.values():
            per_gpu[row["gpu_uuid"]] = per_gpu.get(row["gpu_uuid"], 0) + row["memory_mib"]
        assert sorted(per_gpu.values()) == [20480, 20480]  # never over a 24 GiB GPU
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        res.delete_collection_namespaced_resource_claim(namespace)
        res.delete_resource_slice(f"{node}-{DRIVER}")
        res.delete_device_class(DRIVER)


def test_share_over_measured_headroom_is_refused_though_dra_has_room(
    k8s_client: k8s.ApiClient,
    kube_scheduler: Any,
    headroom: Headroom,
    make_node: Any,
    namespace: str,
) -> None:
    """Nothing caps a DRA share at run time: a tenant using 20 GiB of its 10 GiB share
    leaves 14 GiB on paper but 3.5 GiB measured, and the next 10 GiB share is refused
    with a reason that says so."""
    core: Any = k8s.CoreV1Api(k8s_client)
    res: Any = k8s.ResourceV1Api(k8s_client)
    node, driver = _shareable_node(res, make_node, headroom, "dra-over", "g5.xlarge", "1xA10G:24Gi")
    kube_scheduler(headroom.url)
    try:
        _shared_pod(res, core, namespace, "greedy", "10Gi")
        pod, _ = _bound_rows(core, headroom, namespace, "greedy")
        driver.start_process(pod.metadata.uid, driver.gpu_uuids[0], used_mib=20480)
        headroom.report(node, labels=None)
        _shared_pod(res, core, namespace, "next", "10Gi")
        message = wait_unschedulable(core, namespace, "next")
        assert "DRA share of GPU" in message and "10240 MiB asked, measured headroom" in message
        headroom_mib = int(message.split("measured headroom ")[1].split(" MiB")[0])
        assert headroom_mib < 10240 - 6144, message  # paper says 14 GiB left; memory says less
        assert core.read_namespaced_pod("next", namespace).spec.node_name is None
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        res.delete_collection_namespaced_resource_claim(namespace)
        res.delete_resource_slice(f"{node}-{DRIVER}")
        res.delete_device_class(DRIVER)


def test_plain_nvidia_gpu_served_by_dra_is_granted_ledgered_and_billed(
    k8s_client: k8s.ApiClient,
    kube_scheduler: Any,
    headroom: Headroom,
    make_node: Any,
    namespace: str,
) -> None:
    """KEP-5004 (GA in 1.37): a DeviceClass with ``extendedResourceName: nvidia.com/gpu``
    serves ``nvidia.com/gpu: 1`` on a node whose allocatable lacks it. kube-scheduler makes
    the claim; the ledger records that claim's device (not one headroom picked) and bills it."""
    core: Any = k8s.CoreV1Api(k8s_client)
    res: Any = k8s.ResourceV1Api(k8s_client)
    node = make_node("dra-ext", gpus=0, capacity_type="on-demand", instance_type="g5.12xlarge")
    driver = headroom.agent(node, "4xA10G:24Gi")
    res.create_resource_slice(nvidia_slice(node, driver.gpu_uuids))
    res.create_device_class(device_class(DRIVER, extended_resource_name="nvidia.com/gpu"))
    kube_scheduler(headroom.url)
    try:
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": "plain", "labels": {"team": "classic"}},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        )
        pod, (row,) = _bound_rows(core, headroom, namespace, "plain")
        status = raw(core.read_namespaced_pod_with_http_info, "plain", namespace)["status"]
        claim_name = status["extendedResourceClaimStatus"]["resourceClaimName"]
        claim = raw(res.read_namespaced_resource_claim_with_http_info, claim_name, namespace)
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert pod.spec.node_name == node
        assert row["claim"] == f"{namespace}/{claim_name}" and row["sharing"] == "dra"
        assert row["dra_device"] == f"{DRIVER}/{node}/{result['device']}"
        assert row["gpu_uuid"] == driver.gpu_uuids[int(result["device"].split("-")[1])]
        assert row["memory_mib"] == 24576 and row["labels"] == {"team": "classic"}
        assert Decimal(row["price_per_hour"]) > 0  # a priced grant of the whole GPU
        # headroom made no grant of its own beside the claim's: one row, and no
        # device-plugin grant annotation (a device plugin would act on it)
        assert len(headroom.allocations(namespace=namespace)) == 1
        assert "headroom.dev/gpu-uuids" not in (pod.metadata.annotations or {})

        def billed() -> dict[str, Any] | None:
            r = httpx.get(headroom.url + "/v1/chargeback", params={"group_by": "namespace"})
            r.raise_for_status()
            groups = {g["key"]: g for g in r.json()["groups"]}
            group = groups.get(namespace)
            return group if group and group["cost"] and Decimal(group["cost"]) > 0 else None

        assert wait_for("a cost for the namespace", billed)["allocations"] == 1
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        res.delete_collection_namespaced_resource_claim(namespace)
        res.delete_resource_slice(f"{node}-{DRIVER}")
        res.delete_device_class(DRIVER)
