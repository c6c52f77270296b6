"""The extender counts the requests of every pod bound to a node, whatever scheduled it,
from the real API server's pod watch, and forgets them when the pod goes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from .headroom_proc import Headroom

pytestmark = pytest.mark.e2e


def gpu_pod(cpu: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "asking", "namespace": "e2e", "uid": "uid-asking"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": {"cpu": cpu}, "limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }


def until(check: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"not seen in {timeout}s: {what}")


def test_pods_of_any_scheduler_take_cpu_until_they_go(
    headroom: Headroom, make_node: Any, namespace: str, k8s_client: k8s.ApiClient
) -> None:
    core = k8s.CoreV1Api(k8s_client)
    node = make_node("wn-a", gpus=4, cpu="8", instance_type="g5.12xlarge")
    headroom.agent(node, "4xA10G:24Gi")
    args = {"Pod": gpu_pod("4"), "NodeNames": [node], "Nodes": None}

    def filtered() -> dict[str, Any]:
        return dict(httpx.post(f"{headroom.url}/filter", json=args, timeout=10).json())

    assert until(lambda: filtered()["NodeNames"] == [node], "the empty node passes")
    # a pod placed by someone else (spec.nodeName set: no scheduler involved) asks 6 cores
    other: Any = {
        "metadata": {"name": "other"},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "6"}},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }
    core.create_namespaced_pod(namespace, other)
    reason = "insufficient cpu 4000m asked, 2000m free"
    until(lambda: filtered()["FailedNodes"].get(node) == reason, reason)
    core.delete_namespaced_pod("other", namespace, grace_period_seconds=0)
    until(lambda: filtered()["NodeNames"] == [node], "the node passes again once the pod is gone")
