"""Pods that ask no GPU are steered off the CPU and memory that idle GPUs need: the pure
score (``extender.scoring.hostonly``) and the prioritize reply over real HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from extender.scoring.batch import GpuBatch
from extender.scoring.hostonly import host_priorities
from extender.scoring.model import GpuDemand, GpuView, Limits, NodeView, Shape
from extender.scoring.policies.fgd import Fgd
from extender.scoring.policies.headroom import Headroom
from extender.scoring.policy import Context
from tests.support import gpu_pod, running_extender
from tests.test_whole_node_http import report_with

GIB = 1024
LIM = Limits(margin_mib=0, idle_mib=0)
# the mix: whole GPUs with 8 cores each
CTX = Context(limits=LIM, mix=((Shape(1, None, "", 8_000, 0), 1.0),))


def node(name: str, gpus: int, busy: int, cpu_alloc: int, cpu_used: int) -> NodeView:
    views = tuple(
        GpuView(f"{name}-gpu{i}", i, "A10G", 24 * GIB, 24 * GIB if i < busy else 0)
        for i in range(gpus)
    )
    return NodeView(
        name, views, "on-demand", cpu_allocatable_milli=cpu_alloc, cpu_requested_milli=cpu_used
    )


def scores(policy: Any, views: list[NodeView], demand: GpuDemand) -> list[float]:
    batch = GpuBatch.from_views(views, LIM)
    rows = np.arange(len(views), dtype=np.int64)
    return policy.score_host_rows(batch, rows, demand, CTX).tolist()


def test_a_cpu_pod_goes_where_it_strands_no_gpu() -> None:
    views = [
        node("busy", 4, busy=4, cpu_alloc=32_000, cpu_used=8_000),  # no free GPU to strand
        node("cpu-only", 0, busy=0, cpu_alloc=32_000, cpu_used=0),
        node("roomy", 4, busy=0, cpu_alloc=64_000, cpu_used=0),  # 58 cores serve all 4 GPUs
        node("short", 4, busy=0, cpu_alloc=32_000, cpu_used=0),  # 26 cores serve 3.25 of 4
        node("tight", 4, busy=0, cpu_alloc=12_000, cpu_used=0),  # 6 cores left: < 8
    ]
    pod = GpuDemand(0, cpu_milli=6_000)
    busy, cpu_only, roomy, short, tight = scores(Headroom(), views, pod)
    assert busy == cpu_only == roomy == 0.0
    # every shape still fits on "short", so F is unchanged, but its CPU no longer keeps up
    # with its idle GPUs at 8 cores each: 0.75 GPU (18 GiB) stranded
    assert short == -18.0
    # "tight": F loses all 4 idle GPUs (96 GiB), and the CPU serves 0.75 GPU instead of 1.5
    assert tight == -(96.0 + 18.0)
    # FGD sees only what F sees
    assert scores(Fgd(), views, pod) == [0.0, 0.0, 0.0, 0.0, -96.0]


def test_nodes_without_a_report_are_neutral() -> None:
    views = [node("tight", 4, busy=0, cpu_alloc=12_000, cpu_used=0)]
    batch = GpuBatch.from_views(views, LIM)
    raw = Headroom().score_host_rows(
        batch, np.array([-1, 0], np.int64), GpuDemand(0, cpu_milli=6_000), CTX
    )
    assert raw[0] == 0.0 and raw[1] < 0.0


def cpu_only_pod(name: str, cpu: str) -> dict[str, Any]:
    pod = gpu_pod(name, gpus=0)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    return pod


def test_prioritize_ranks_a_cpu_pod_away_from_idle_gpus(tmp_path: Path) -> None:
    """Over HTTP: a node whose GPUs are all granted and a node the extender has no report of
    (a CPU-only node) cost nothing and score 10; the node whose idle GPUs need the CPU
    (the GPU pods seen so far ask 8 cores a GPU, and 4 of its 16 would leave 12 for 2 idle
    GPUs) scores in the lower tier; the filter still passes every node (the in-tree filter
    judges CPU-only pods)."""
    with running_extender(tmp_path) as ext:
        for name in ("busy", "idle"):
            ext.add_node(name, "2xA10G:24Gi")
            assert report_with(ext, name, {"cpu": "16", "memory": "64Gi"}).status_code == 200
        for i in range(2):
            pod = gpu_pod(f"g{i}")
            pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "8"}
            assert ext.post("filter", ext.schedule_args(pod, ["busy"])).json()["NodeNames"]
            bind = {"PodName": f"g{i}", "PodNamespace": "ml", "PodUID": f"uid-g{i}", "Node": "busy"}
            assert ext.post("bind", bind).json() == {"Error": ""}
        names = ["idle", "cpu-node", "busy"]
        pod = cpu_only_pod("web", "4")
        assert ext.post("filter", ext.schedule_args(pod, names)).json()["NodeNames"] == names
        body = ext.post("prioritize", ext.schedule_args(pod, names)).json()
        score = {h["Host"]: h["Score"] for h in body}
        assert score["busy"] == score["cpu-node"] == 10  # costless: the in-tree scores choose
        assert score["idle"] <= 5  # a cost: below every costless node by >= 250 in kube's sum


def test_host_priorities_put_every_costless_node_above_every_costly_one() -> None:
    """One large loss must not round the small ones up to the costless nodes' 10."""
    raw = np.array([0.3, 0.0, -0.01, -0.02, -40.0])
    assert host_priorities(raw).tolist() == [10, 10, 5, 5, 0]
    assert host_priorities(np.array([0.0, -1.0])).tolist() == [10, 5]
    assert host_priorities(np.zeros(3)).tolist() == [10, 10, 10]
