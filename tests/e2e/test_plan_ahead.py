"""A pending pod created in the real API server reaches ``headroom serve`` through its
pod watch, which has the pod's plan made before kube-scheduler's filter asks: the
filter then makes no pass over the candidates (``headroom_scheduling_passes_total``).

No kube-scheduler runs here: the test makes the filter calls kube-scheduler would make
(the pod as the API server serves it, the candidates' names), after the watch has had
its turn, so nothing races; with a real kube-scheduler the filter comes after its own
filter plugins over every node (docs/BENCHMARKS.md, "Plans made ahead")."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from .headroom_proc import Headroom
from .test_scheduling import pod_body

pytestmark = pytest.mark.e2e


def passes(h: Headroom) -> dict[str, float]:
    text = httpx.get(h.url + "/metrics", timeout=10).text
    found = re.findall(r'^headroom_scheduling_passes_total\{when="(\w+)"\} (\S+)$', text, re.M)
    return {when: float(n) for when, n in found}


def filtered(h: Headroom, api: k8s.ApiClient, pod: Any, names: list[str]) -> dict[str, Any]:
    """filter as kube-scheduler calls it: the pod as its informer has it."""
    body = {"Pod": api.sanitize_for_serialization(pod), "Nodes": None, "NodeNames": names}
    r = httpx.post(h.url + "/filter", json=body, timeout=10)
    r.raise_for_status()
    reply: dict[str, Any] = r.json()
    return reply


def wait_ahead(h: Headroom, count: float, what: str) -> None:
    deadline = time.monotonic() + 30
    while passes(h)["ahead"] < count:
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_pending_pod_gets_its_plan_made_before_its_filter(
    headroom: Headroom, make_node: Any, namespace: str, k8s_client: k8s.ApiClient
) -> None:
    core: Any = k8s.CoreV1Api(k8s_client)
    names = [make_node(f"ahead-{i}", gpus=4, instance_type="g5.12xlarge") for i in range(3)]
    for i, name in enumerate(names):
        d = headroom.agent(name, "4xA10G:24Gi")
        for uuid in d.gpu_uuids[: i + 1]:  # node i: i+1 GPUs with 20 GiB in use
            d.start_process(f"hog-{uuid}", uuid, 20 * 1024)
        headroom.report(name, labels=None)
    first = core.create_namespaced_pod(namespace, pod_body("first", "6Gi"))
    assert filtered(headroom, k8s_client, first, names)["NodeNames"]  # the candidates

    before = passes(headroom)
    second = core.create_namespaced_pod(namespace, pod_body("second", "7Gi"))  # a new shape
    wait_ahead(headroom, before["ahead"] + 1, "the watch never had the pod's plan made")
    reply = filtered(headroom, k8s_client, second, names[::-1])  # permuted, as it comes
    assert passes(headroom)["cycle"] == before["cycle"]  # the filter made no pass
    assert reply["NodeNames"] and set(reply["NodeNames"]) <= set(names)

    gated = pod_body("whole", None, gpus=4)  # no node has 4 idle GPUs
    gated["spec"]["schedulingGates"] = [{"name": "e2e.headroom.dev/hold"}]
    core.create_namespaced_pod(namespace, gated)
    time.sleep(1.0)  # kube-scheduler would not take it yet: nothing made for it
    assert passes(headroom)["ahead"] == before["ahead"] + 1
    ungated = core.patch_namespaced_pod(
        "whole", namespace, [{"op": "remove", "path": "/spec/schedulingGates"}]
    )
    wait_ahead(headroom, before["ahead"] + 2, "the ungated pod's plan was not made")
    reply = filtered(headroom, k8s_client, ungated, names)
    assert passes(headroom)["cycle"] == before["cycle"]
    assert reply["NodeNames"] == [] and set(reply["FailedNodes"]) == set(names)
