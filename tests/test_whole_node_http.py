"""The whole node over real HTTP: the filter refuses what NodeResourcesFit would refuse,
counts the pods it bound, and reads allocatable from the agent report (standalone) or
from the Node objects kube-scheduler sends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from drivers.agent.loop import build_report
from tests.support import Extender, gpu_pod, real_node, running_extender


def report_with(ext: Extender, name: str, allocatable: dict[str, str]) -> Any:
    driver = ext.drivers[name]
    rep = build_report(driver, name, driver.attribute, ext.clock, labels=ext.labels[name])
    rep = msgspec.structs.replace(rep, allocatable=allocatable)
    return ext.client.post("/v1/reports", content=msgspec.json.encode(rep))


def cpu_pod(name: str, cpu: str, memory: str = "1Gi") -> dict[str, Any]:
    pod = gpu_pod(name, memory="4Gi")
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu, "memory": memory}
    return pod


@pytest.fixture
def ext(tmp_path: Path) -> Iterator[Extender]:
    with running_extender(tmp_path) as e:
        e.add_node("small", "4xA10G:24Gi")
        e.add_node("big", "4xA10G:24Gi")
        assert report_with(e, "small", {"cpu": "8", "memory": "32Gi"}).status_code == 200
        assert report_with(e, "big", {"cpu": "64", "memory": "256Gi"}).status_code == 200
        yield e


def test_a_node_without_the_cpu_is_refused_with_the_reason(ext: Extender) -> None:
    body = ext.post("filter", ext.schedule_args(cpu_pod("p", "12"), ["small", "big"])).json()
    assert body["NodeNames"] == ["big"]
    assert body["FailedNodes"]["small"] == "insufficient cpu 12000m asked, 8000m free"


def test_bound_pods_count_until_released(ext: Extender) -> None:
    """Two 6-core pods cannot both go to the 8-core node: the first one's requests count."""
    first = cpu_pod("a", "6")
    assert ext.post("filter", ext.schedule_args(first, ["small"])).json()["NodeNames"] == ["small"]
    bind = {"PodName": "a", "PodNamespace": "ml", "PodUID": "uid-a", "Node": "small"}
    assert ext.post("bind", bind).json() == {"Error": ""}
    body = ext.post("filter", ext.schedule_args(cpu_pod("b", "6"), ["small"])).json()
    assert body["NodeNames"] == []
    assert body["FailedNodes"]["small"] == "insufficient cpu 6000m asked, 2000m free"
    ext.built.service.release("uid-a", "deleted")
    body = ext.post("filter", ext.schedule_args(cpu_pod("c", "6"), ["small"])).json()
    assert body["NodeNames"] == ["small"]


def test_a_bad_allocatable_is_refused_naming_the_key(ext: Extender) -> None:
    r = report_with(ext, "small", {"cpu": "lots"})
    assert r.status_code == 422
    assert "allocatable.cpu" in r.text


def test_node_objects_give_allocatable_in_nodes_mode(tmp_path: Path) -> None:
    """kube-scheduler's Node objects carry status.allocatable (47810m CPU in the fixture):
    they win over the report's, as for labels."""
    with running_extender(tmp_path) as ext:
        ext.add_node("n1", "4xA10G:24Gi")
        assert report_with(ext, "n1", {"cpu": "500"}).status_code == 200
        args = {"Pod": cpu_pod("p", "48"), "Nodes": {"items": [real_node("n1")]}, "NodeNames": None}
        body = ext.post("filter", args).json()
        assert body["FailedNodes"]["n1"] == "insufficient cpu 48000m asked, 47810m free"
        args["Pod"] = cpu_pod("q", "47")
        assert [
            n["metadata"]["name"] for n in ext.post("filter", args).json()["Nodes"]["items"]
        ] == ["n1"]
