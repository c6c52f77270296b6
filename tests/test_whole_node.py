"""The whole node in scoring: a GPU behind a node's exhausted CPU or memory is waste.

FGD's own definition (Weng et al., ATC'23): for a task of the workload mix, every free
GPU on a node that lacks the CPU or memory the task needs, or whose model the task may
not use, is fragmented for it. The policies must see it, and the filter must never pass
a node whose CPU or memory NodeResourcesFit would refuse.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from extender.scoring import Context, Limits, evaluate, policy_by_name
from extender.scoring.batch import GpuBatch
from extender.scoring.fragmentation import fragmentation_delta, fragmentation_of
from extender.scoring.framework import evaluate_batch
from extender.scoring.model import GpuDemand, GpuView, NodeView, Shape
from extender.state.demand import GPU_PRODUCT, allowed_models
from extender.state.host import HostLoad, pod_requests
from extender.wire.protocol import Pod

EXACT = Limits(margin_mib=0, idle_mib=0)
GPU = 16_000


def node(name: str, gpus: int, cpu_free: int, model: str = "T4", cpu: int = 64_000) -> NodeView:
    views = tuple(GpuView(f"{name}-{i}", i, model, GPU, 0) for i in range(gpus))
    return NodeView(
        name,
        views,
        "on-demand",
        cpu_allocatable_milli=cpu,
        cpu_requested_milli=cpu - cpu_free,
        memory_allocatable_mib=262_144,
    )


# the mix: whole-GPU tasks needing 8 cores
MIX = ((Shape(1, None, "", 8_000, 16_384), 1.0),)
CTX = Context(EXACT, MIX)


def test_a_gpu_behind_exhausted_cpu_counts_as_fragmented() -> None:
    """Two idle GPUs, 12 cores free: a pod taking one GPU and 6 cores leaves 6, too few for
    the mix's 8-core task, so the other GPU's whole memory becomes fragmented."""
    n = node("a", 2, 12_000)
    pod = GpuDemand(1, None, cpu_milli=6_000)
    assert fragmentation_of(GpuBatch.from_views([n], EXACT), EXACT, MIX).tolist() == [0.0]
    assert fragmentation_delta(n, pod, (n.gpus[0],), EXACT, MIX) == GPU
    light = GpuDemand(1, None, cpu_milli=2_000)  # leaves 10 cores: still room
    assert fragmentation_delta(n, light, (n.gpus[0],), EXACT, MIX) == 0


def test_a_node_without_the_cpu_is_all_fragmented_and_a_disallowed_model_is_outside() -> None:
    """Short of CPU for the mix's task: all free memory is fragmented (FGD). A model the
    task may not use: outside the task's F (0), so taking memory there is neither a gain
    nor a loss for it (a gain in MiB would pull whole-GPU pods to the largest GPUs)."""
    short = node("short", 4, 4_000)
    other = node("other", 4, 64_000, model="V100")
    constrained = ((Shape(1, None, "", 0, 0, frozenset({"T4"})), 1.0),)
    batch = GpuBatch.from_views([short, other], EXACT)
    assert fragmentation_of(batch, EXACT, MIX).tolist() == [4 * GPU, 0.0]
    assert fragmentation_of(batch, EXACT, constrained).tolist() == [0.0, 0.0]
    pod = GpuDemand(1, None)
    assert fragmentation_delta(other, pod, (other.gpus[0],), EXACT, constrained) == 0.0


def test_headroom_keeps_gpus_out_from_behind_a_full_cpu() -> None:
    """A 6-core pod: on ``tight`` it strands a GPU behind 6 leftover cores; on ``roomy`` it
    does not. Both are equal on GPUs alone; the whole-node policy tells them apart."""
    tight, roomy = node("tight", 2, 12_000), node("roomy", 2, 40_000)
    pod = GpuDemand(1, None, cpu_milli=6_000)
    policy = policy_by_name("headroom")
    a, b = evaluate(tight, pod, policy, CTX), evaluate(roomy, pod, policy, CTX)
    assert a.fits and b.fits and b.raw > a.raw
    fits, raw = evaluate_batch(GpuBatch.from_views([tight, roomy], EXACT), pod, policy, CTX)
    assert fits.tolist() == [True, True] and raw.tolist() == [a.raw, b.raw]


def test_binpack_measures_leftover_over_gpu_and_cpu() -> None:
    """Equal GPU fill: best fit prefers the node whose CPU the pod fills."""
    busy, idle = node("busy", 2, 8_000, cpu=16_000), node("idle", 2, 16_000, cpu=16_000)
    pod = GpuDemand(1, None, cpu_milli=4_000)
    ctx = Context(EXACT)
    policy = policy_by_name("binpack")
    assert evaluate(busy, pod, policy, ctx).raw > evaluate(idle, pod, policy, ctx).raw


def test_the_filter_refuses_what_node_resources_fit_refuses() -> None:
    full = node("full", 4, 2_000)
    pod = GpuDemand(1, 4096, cpu_milli=4_000, host_memory_mib=1024)
    for name in ("headroom", "fgd", "binpack", "spread", "gpu-packing"):
        ev = evaluate(full, pod, policy_by_name(name), CTX)
        assert not ev.fits and ev.reason == "insufficient cpu 4000m asked, 2000m free"
        fits, _ = evaluate_batch(GpuBatch.from_views([full], EXACT), pod, policy_by_name(name), CTX)
        assert not fits.any()


def test_unknown_allocatable_never_refuses() -> None:
    """A node whose CPU and memory are not known (no Node object, no agent ``allocatable``)
    is scored on its GPUs alone, as before."""
    bare = NodeView("bare", (GpuView("g", 0, "T4", GPU, 0),))
    pod = GpuDemand(1, None, cpu_milli=500_000, host_memory_mib=10**7)
    assert evaluate(bare, pod, policy_by_name("headroom"), CTX).fits
    batch = GpuBatch.from_views([bare], EXACT)
    assert np.array_equal(fragmentation_of(batch, EXACT, MIX), [0.0])


def pod(spec: dict[str, Any]) -> Pod:
    return msgspec.convert({"metadata": {"name": "p"}, "spec": spec}, Pod)


def c(cpu: str, mem: str, **extra: Any) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}, **extra}


def test_pod_requests_count_as_kube_scheduler_counts() -> None:
    """Containers add up; an init container counts alone with the sidecars started before
    it; sidecars run beside the app; overhead is added (resourcehelper.PodRequests)."""
    assert pod_requests(pod({"containers": [c("1", "1Gi"), c("500m", "512Mi")]})) == (1500, 1536)
    big_init = {"containers": [c("1", "1Gi")], "initContainers": [c("4", "8Gi")]}
    assert pod_requests(pod(big_init)) == (4000, 8192)
    sidecar = {
        "containers": [c("1", "1Gi")],
        "initContainers": [c("250m", "256Mi", restartPolicy="Always"), c("2", "1Gi")],
        "overhead": {"cpu": "100m", "memory": "64Mi"},
    }
    assert pod_requests(pod(sidecar)) == (2350, 1344)  # max(1.25, 0.25 + 2) + 0.1
    limits_only = {"containers": [{"name": "c", "resources": {"limits": {"cpu": "3"}}}]}
    assert pod_requests(pod(limits_only)) == (3000, 0)


def test_allowed_models_from_selector_and_required_affinity() -> None:
    selected = {"containers": [], "nodeSelector": {GPU_PRODUCT: "NVIDIA A10G"}}
    assert allowed_models(pod(selected)) == frozenset({"NVIDIA-A10G"})

    def term(*values: str) -> dict[str, Any]:
        expr = {"key": GPU_PRODUCT, "operator": "In", "values": list(values)}
        return {"matchExpressions": [expr]}

    def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
        required = {"nodeSelectorTerms": list(terms)}
        node_aff = {"requiredDuringSchedulingIgnoredDuringExecution": required}
        return {"containers": [], "affinity": {"nodeAffinity": node_aff}}

    either = affinity(term("NVIDIA-L4"), term("NVIDIA-A10G", "NVIDIA-L40S"))
    assert allowed_models(pod(either)) == {"NVIDIA-L4", "NVIDIA-A10G", "NVIDIA-L40S"}
    open_term = affinity(term("NVIDIA-L4"), {"matchExpressions": []})
    assert allowed_models(pod(open_term)) == frozenset()  # terms are alternatives
    assert allowed_models(pod({"containers": []})) == frozenset()


def test_headroom_fills_nodes_in_step_over_their_resources() -> None:
    """Two idle 8-GPU nodes, equal on GPUs: one CPU-rich, one CPU-poor, and a workload of
    whole GPUs with 8 cores each (the poor node's 48 cores serve 6 of its 8 GPUs). A
    CPU-hungry pod goes to the CPU-rich one, a CPU-light pod to the CPU-poor one, where it
    takes a GPU its CPU could not have served, so neither node ends with GPUs stranded
    behind its CPU (FGD's F alone sees no difference: every shape still fits on both)."""
    rich, poor = node("rich", 8, 192_000, cpu=192_000), node("poor", 8, 48_000, cpu=48_000)
    mix = ((Shape(1, None, "", 8_000, 0), 1.0),)
    policy, ctx = policy_by_name("headroom"), Context(EXACT, mix)
    hungry, light = GpuDemand(1, None, cpu_milli=20_000), GpuDemand(1, None, cpu_milli=2_000)
    for pod, want in ((hungry, "rich"), (light, "poor")):
        raw = {n.name: evaluate(n, pod, policy, ctx).raw for n in (rich, poor)}
        assert max(raw, key=lambda k: raw[k]) == want, raw


def test_a_repeated_pod_event_changes_no_node() -> None:
    """The pod watch sends a pod again on every status update; the node (and every plan
    cached for it) changes only when its requests do."""
    load = HostLoad()
    assert load.put("u", "n", 1000, 512) == {"n"}
    assert load.put("u", "n", 1000, 512) == set()
    assert load.put("u", "n", 2000, 512) == {"n"} and load.requested("n") == (2000, 512)
    assert load.drop("u") == {"n"} and load.requested("n") == (0, 0)
