"""A seeded synthetic GPU workload: fractional-memory, whole-GPU, multi-GPU and
on-demand-only pods with lifetimes (documented shares below)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from extender.wire.annotations import ANN_MEMORY

# shape: (share, gpus, memory GiB per GPU or None for whole GPUs)
SHAPES: tuple[tuple[float, int, tuple[int, ...] | None], ...] = (
    (0.50, 1, (4, 6, 8, 10, 12, 16, 20)),  # inference / notebooks: a slice of one GPU
    (0.10, 1, (24, 32, 40)),  # bigger slices: only fits some GPU models
    (0.05, 2, (8, 16)),  # sharded inference on two GPUs
    (0.25, 1, None),  # one whole GPU
    (0.10, 0, None),  # multi-GPU training: 2, 4 or 8 whole GPUs (count drawn below)
)
ON_DEMAND_ONLY_SHARE = 0.25  # pods marked karpenter.sh/do-not-disrupt
NAMESPACES = (("inference", "serving"), ("research", "ml"), ("training", "ml"), ("batch", "data"))
MEAN_LIFETIME_S = 3 * 3600.0
ARRIVAL_GAP_S = 30.0


@dataclass(frozen=True)
class SimPod:
    uid: str
    name: str
    namespace: str
    team: str
    gpus: int
    memory_gib: int | None
    on_demand_only: bool
    arrival_s: float
    lifetime_s: float
    usage_fraction: float  # of the grant the pod's processes actually use

    def manifest(self) -> dict[str, Any]:
        """The v1.Pod the scheduler would send (only what headroom reads, plus realism)."""
        annotations = {}
        if self.memory_gib is not None:
            annotations[ANN_MEMORY] = f"{self.memory_gib}Gi"
        if self.on_demand_only:
            annotations["karpenter.sh/do-not-disrupt"] = "true"
        gpu = {"nvidia.com/gpu": str(self.gpus)}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": self.uid,
                "labels": {"team": self.team, "app": self.name.rsplit("-", 1)[0]},
                "annotations": annotations,
            },
            "spec": {
                "schedulerName": "default-scheduler",
                "containers": [
                    {
                        "name": "main",
                        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                        "resources": {
                            "limits": {**gpu, "cpu": "4", "memory": "16Gi"},
                            "requests": {**gpu, "cpu": "4", "memory": "16Gi"},
                        },
                    }
                ],
            },
            "status": {"phase": "Pending"},
        }


def make_workload(n: int, seed: int) -> list[SimPod]:
    rng = random.Random(seed * 7919 + 1)
    pods = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(1 / ARRIVAL_GAP_S)
        _, gpus, mems = rng.choices(SHAPES, weights=[s[0] for s in SHAPES])[0]
        count = gpus or rng.choice((2, 4, 8))
        memory = rng.choice(mems) if mems else None
        ns, team = rng.choice(NAMESPACES)
        pods.append(
            SimPod(
                uid=f"{seed:04x}0000-0000-4000-8000-{i:012x}",
                name=f"{ns}-job-{i}",
                namespace=ns,
                team=team,
                gpus=count,
                memory_gib=memory,
                on_demand_only=rng.random() < ON_DEMAND_ONLY_SHARE,
                arrival_s=t,
                lifetime_s=rng.expovariate(1 / MEAN_LIFETIME_S),
                usage_fraction=rng.uniform(0.5, 0.95),
            )
        )
    return pods
