"""A seeded simulated Karpenter cluster: mixed GPU instance types, spot and on-demand."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from extender.pricing import InstancePrice, PriceBook
from extender.state.nodefacts import (
    CAPACITY_TYPE,
    GPU_COUNT,
    GPU_MEMORY,
    GPU_NAME,
    INSTANCE_TYPE,
    NODEPOOL,
    ZONE,
)

# (instance type, relative frequency): what a GPU NodePool on AWS typically launches.
INSTANCE_MIX: tuple[tuple[str, int], ...] = (
    ("g5.xlarge", 4),
    ("g5.12xlarge", 3),
    ("g6.xlarge", 3),
    ("g6.12xlarge", 2),
    ("g6e.xlarge", 2),
    ("g6e.12xlarge", 1),
    ("p4d.24xlarge", 1),
    ("p5.48xlarge", 1),
)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
SPOT_SHARE = 0.5


@dataclass(frozen=True)
class SimNode:
    name: str
    instance_type: str
    capacity_type: str
    zone: str
    gpus: int
    gpu_model: str
    gpu_memory_mib: int

    @property
    def spec(self) -> str:
        """The simulated driver's GPU spec, e.g. ``4xA10G:24576Mi``."""
        return f"{self.gpus}x{self.gpu_model}:{self.gpu_memory_mib}Mi"

    @property
    def labels(self) -> dict[str, str]:
        return {
            INSTANCE_TYPE: self.instance_type,
            CAPACITY_TYPE: self.capacity_type,
            ZONE: self.zone,
            NODEPOOL: "gpu-" + self.capacity_type,
            GPU_COUNT: str(self.gpus),
            GPU_MEMORY: str(self.gpu_memory_mib),
            GPU_NAME: self.gpu_model.lower(),
            "kubernetes.io/hostname": self.name,
        }


def draw_instances(
    n: int,
    rng: random.Random,
    prices: PriceBook,
    mix: tuple[tuple[str, int], ...] = INSTANCE_MIX,
    spot_share: float = SPOT_SHARE,
) -> Iterator[tuple[str, InstancePrice, str]]:
    """``n`` (instance type, its catalog entry, capacity type) drawn from ``mix``: what a
    Karpenter GPU NodePool launches. A generator, so callers may draw more from ``rng``
    per node (zones) in the same sequence."""
    types = [t for t, _ in mix]
    weights = [w for _, w in mix]
    for _ in range(n):
        itype = rng.choices(types, weights)[0]
        info = prices.instance(itype)
        if info is None:
            raise ValueError(f"instance type {itype} missing from the price table")
        yield itype, info, "spot" if rng.random() < spot_share else "on-demand"


def make_cluster(n: int, seed: int, prices: PriceBook) -> list[SimNode]:
    rng = random.Random(seed)
    nodes = []
    for i, (itype, info, capacity) in enumerate(draw_instances(n, rng, prices)):
        nodes.append(
            SimNode(
                f"gpu-node-{i:03d}",
                itype,
                capacity,
                rng.choice(ZONES),
                info.gpus,
                info.gpu_model,
                info.gpu_memory_mib,
            )
        )
    return nodes
