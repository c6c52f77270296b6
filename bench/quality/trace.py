"""Pod traces: a seeded synthetic GPU-sharing workload, and Alibaba's ``cluster-trace-gpu-v2023``
pod CSV format, both as ``TracePod``s (a ``GpuDemand`` plus allowed GPU models and CPU/memory).

Synthetic distribution (shares of GPU pods; the numbers are this project's choice, shaped
after the Alibaba trace's mix of sharing, whole-GPU and multi-GPU tasks):

| class        | share | GPUs            | GiB per GPU                    | model-constrained     |
|--------------|-------|-----------------|--------------------------------|-----------------------|
| small slice  | 0.45  | 1               | 2,4,6,8,10,12,16,20 (w 13231221) | 25%: T4/A10G/L4     |
| large slice  | 0.10  | 1               | 24, 32, 40                     | 25%: L40S/A100/H100   |
| 2-GPU slices | 0.05  | 2               | 8, 12, 16                      | none                  |
| whole GPU    | 0.30  | 1               | whole                          | 35%: one of 3 sets(*) |
| multi-GPU    | 0.10  | 2,4,8 (w 5,3,2) | whole                          | 60%: A100/H100        |

(*) {A10G, L4}, {L40S} or {A100, H100}, equally likely.
About a third of pods carry a model constraint (Alibaba reports ~33% of its GPU tasks do).
On-demand-only (not interruption tolerant): 40% of slices (serving), 30% of whole-GPU pods,
15% of multi-GPU pods (training that checkpoints); the rest accept spot.
CPU and memory requests scale with g = GPUs x min(1, GiB/24): CPU U(0.5, 3.5) x g cores
(at least 0.25), memory U(2, 12) x g GiB (at least 0.5).

Alibaba mapping (``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,...``):
- ``num_gpu == 0`` (CPU-only) is skipped: headroom passes every node for such pods.
- ``num_gpu == 1`` and ``gpu_milli < 1000``: memory = ceil(gpu_milli / 1000 x the smallest
  memory among the allowed models present in the cluster), so the share fits every GPU the
  pod may use; otherwise ``num_gpu`` whole GPUs.
- ``gpu_spec`` ``A|B`` -> allowed models {A, B}; empty or ``nan`` -> any model.
- ``qos``: ``BE`` and ``Burstable`` tolerate interruption (capacity any: may run on spot);
  ``LS``, ``Guaranteed`` and anything else are on-demand only.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from extender.scoring.policy import ShapeLike
from extender.state.demand import CapacityPref, GpuDemand
from extender.state.workload import mix_of

GIB = 1024
TOLERANT_QOS = frozenset({"BE", "BURSTABLE"})
NO_SPEC = frozenset({"", "nan", "NaN", "none"})


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    demand: GpuDemand
    models: frozenset[str]  # allowed GPU models; empty = any
    cpu_milli: int
    memory_mib: int

    @property
    def on_demand_only(self) -> bool:
        return self.demand.capacity is CapacityPref.ON_DEMAND


# (share, class name, GPU counts with weights, GiB choices with weights or None = whole,
#  constrained share, allowed-model sets, on-demand-only share)
_Class = tuple[
    float,
    str,
    tuple[tuple[int, int], ...],
    tuple[tuple[int, int], ...] | None,
    float,
    tuple[frozenset[str], ...],
    float,
]
CLASSES: tuple[_Class, ...] = (
    (
        0.45,
        "small-slice",
        ((1, 1),),
        ((2, 1), (4, 3), (6, 2), (8, 3), (10, 1), (12, 2), (16, 2), (20, 1)),
        0.25,
        (frozenset({"T4", "A10G", "L4"}),),
        0.40,
    ),
    (
        0.10,
        "large-slice",
        ((1, 1),),
        ((24, 1), (32, 1), (40, 1)),
        0.25,
        (frozenset({"L40S", "A100", "H100"}),),
        0.40,
    ),
    (0.05, "2-gpu-slices", ((2, 1),), ((8, 1), (12, 1), (16, 1)), 0.0, (), 0.40),
    (
        0.30,
        "whole-gpu",
        ((1, 1),),
        None,
        0.35,
        (frozenset({"A10G", "L4"}), frozenset({"L40S"}), frozenset({"A100", "H100"})),
        0.30,
    ),
    (0.10, "multi-gpu", ((2, 5), (4, 3), (8, 2)), None, 0.60, (frozenset({"A100", "H100"}),), 0.15),
)


def _pick(rng: random.Random, weighted: Sequence[tuple[int, int]]) -> int:
    return rng.choices([v for v, _ in weighted], [w for _, w in weighted])[0]


def make_trace(n: int, seed: int) -> list[TracePod]:
    """``n`` synthetic GPU pods drawn from CLASSES (seeded)."""
    rng = random.Random(seed * 7919 + 17)
    pods = []
    for i in range(n):
        _, kind, counts, mems, constrained, model_sets, od_share = rng.choices(
            CLASSES, [c[0] for c in CLASSES]
        )[0]
        count = _pick(rng, counts)
        gib = _pick(rng, mems) if mems else None
        pinned = bool(model_sets) and rng.random() < constrained
        models = rng.choice(model_sets) if pinned else frozenset()
        capacity = CapacityPref.ON_DEMAND if rng.random() < od_share else CapacityPref.ANY
        g = count * (min(1.0, gib / 24) if gib else 1.0)
        cpu = max(250, round(g * rng.uniform(0.5, 3.5) * 1000))
        mem = max(512, round(g * rng.uniform(2, 12) * GIB))
        demand = GpuDemand(
            count,
            gib * GIB if gib else None,
            capacity=capacity,
            cpu_milli=cpu,
            host_memory_mib=mem,
            models=models,
        )
        pods.append(TracePod(f"{kind}-{i}", demand, models, cpu, mem))
    return pods


def read_alibaba_pods(
    path: Path,
    model_mem: Mapping[str, Sequence[int]],
    qos_capacity: bool = True,
    cpu_only: bool = False,
) -> tuple[list[TracePod], int]:
    """Pods from an ``openb_pod_list`` CSV and the number of rows skipped (CPU-only rows
    unless ``cpu_only``: then they come as pods asking no GPU). ``model_mem``: per GPU
    model in the cluster, the memory of its GPUs (MiB). ``qos_capacity``: read ``qos`` as
    interruption tolerance (below); off, every pod may run on any capacity type."""
    pods, skipped = [], 0
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            pod = alibaba_pod(row, model_mem, qos_capacity, cpu_only)
            if pod is None:
                skipped += 1
            else:
                pods.append(pod)
    return pods, skipped


def alibaba_pod(
    row: Mapping[str, str],
    model_mem: Mapping[str, Sequence[int]],
    qos_capacity: bool = True,
    cpu_only: bool = False,
) -> TracePod | None:
    count = int(row["num_gpu"] or 0)
    cpu, mem = int(row["cpu_milli"]), int(row["memory_mib"])
    if count <= 0:
        if not cpu_only:
            return None
        demand = GpuDemand(0, cpu_milli=cpu, host_memory_mib=mem)
        return TracePod(row["name"], demand, frozenset(), cpu, mem)
    spec = (row.get("gpu_spec") or "").strip()
    models = frozenset() if spec in NO_SPEC else frozenset(s for s in spec.split("|") if s)
    milli = int(row.get("gpu_milli") or 1000)
    memory = None
    if count == 1 and 0 < milli < 1000:
        memory = math.ceil(milli * reference_mib(models, model_mem) / 1000)
    tolerant = (row.get("qos") or "").strip().upper() in TOLERANT_QOS or not qos_capacity
    capacity = CapacityPref.ANY if tolerant else CapacityPref.ON_DEMAND
    demand = GpuDemand(
        count, memory, capacity=capacity, cpu_milli=cpu, host_memory_mib=mem, models=models
    )
    return TracePod(row["name"], demand, models, cpu, mem)


def reference_mib(models: frozenset[str], model_mem: Mapping[str, Sequence[int]]) -> int:
    """Smallest GPU memory among the allowed models present (all models when none is)."""
    sizes = [m for name, ms in model_mem.items() if not models or name in models for m in ms]
    if not sizes:
        sizes = [m for ms in model_mem.values() for m in ms]
    return min(sizes)


def nominal_mib(pod: TracePod, model_mem: Mapping[str, Sequence[int]]) -> float:
    """Memory a pod asks for, for the arrived-workload axis: its ask, or for whole GPUs the
    mean memory of the GPUs it may use (the GPU it lands on is not known in advance)."""
    d = pod.demand
    if d.count == 0:
        return 0.0  # a CPU-only pod is not GPU workload
    if d.memory_mib is not None:
        return float(d.count * d.memory_mib)
    allowed = pod.models
    sizes = [m for name, ms in model_mem.items() if not allowed or name in allowed for m in ms]
    return d.count * (sum(sizes) / len(sizes) if sizes else 0.0)


def trace_mix(pods: Sequence[TracePod], top: int = 8) -> tuple[tuple[ShapeLike, float], ...]:
    """FGD's target workload: what ``extender.state.workload.WorkloadMix`` learns from the
    trace's GPU pods without decay (the ``top`` commonest GPU asks, shares renormalised)."""
    return mix_of((p.demand for p in pods), top)
