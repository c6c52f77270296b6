"""The evaluator's cluster: per-GPU totals and committed memory, CPU/memory allocatable,
capacity type and price, kept as mutable state and shown to scoring as ``NodeView``s.

Synthetic clusters draw Karpenter instance types from ``extender/data/prices.json`` (mix
below); Alibaba ``cluster-trace-gpu-v2023`` node CSVs (``sn,cpu_milli,memory_mib,gpu,model``)
are read as they are, with a seeded capacity type and a stand-in AWS price per GPU model.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass, field
from pathlib import Path

from extender.pricing import PriceBook
from extender.scoring import GpuView, NodeView
from extender.simulate.cluster import draw_instances

GIB = 1024
SPOT = "spot"
ON_DEMAND = "on-demand"

# (instance type, relative frequency): a heterogeneous Karpenter GPU NodePool.
INSTANCE_MIX: tuple[tuple[str, int], ...] = (
    ("g4dn.xlarge", 2),
    ("g5.xlarge", 3),
    ("g5.12xlarge", 3),
    ("g6.xlarge", 3),
    ("g6.12xlarge", 2),
    ("g6e.xlarge", 2),
    ("g6e.12xlarge", 1),
    ("p4d.24xlarge", 1),
    ("p5.48xlarge", 1),
)
# AWS instance vCPU and memory (GiB), public EC2 specs; allocatable is taken as capacity.
CPU_MEM: dict[str, tuple[int, int]] = {
    "g4dn.xlarge": (4, 16),
    "g5.xlarge": (4, 16),
    "g5.2xlarge": (8, 32),
    "g5.12xlarge": (48, 192),
    "g5.48xlarge": (192, 768),
    "g6.xlarge": (4, 16),
    "g6.12xlarge": (48, 192),
    "g6e.xlarge": (4, 32),
    "g6e.12xlarge": (48, 384),
    "p4d.24xlarge": (96, 1152),
    "p4de.24xlarge": (96, 1152),
    "p5.48xlarge": (192, 2048),
    "p5en.48xlarge": (192, 2048),
    "p6-b200.48xlarge": (192, 2048),
}
# Alibaba GPU models: memory per GPU (GiB; G1-G3 are undisclosed, 16/32 GiB assumed) and
# the AWS instance whose on-demand/spot price per GPU stands in for theirs.
ALIBABA_MODELS: dict[str, tuple[int, str]] = {
    "P100": (16, "g4dn.xlarge"),
    "T4": (16, "g4dn.xlarge"),
    "V100M16": (16, "g4dn.xlarge"),
    "V100M32": (32, "g5.xlarge"),
    "A10": (24, "g5.xlarge"),
    "G1": (16, "g4dn.xlarge"),
    "G2": (32, "g5.xlarge"),
    "G3": (32, "g5.xlarge"),
}
UNKNOWN_MODEL = (16, "g4dn.xlarge")


@dataclass
class SimNode:
    """One node's state; ``view()`` is rebuilt only after a change (``version``)."""

    name: str
    instance_type: str
    capacity_type: str
    model: str
    gpu_total_mib: tuple[int, ...]
    cpu_milli: int
    memory_mib: int
    per_hour: float  # $/h for the node's GPUs (the whole instance)
    per_gib_hour: float | None
    committed: list[int] = field(default_factory=list)
    cpu_used: int = 0
    mem_used: int = 0
    pods: int = 0
    version: int = 0
    _view: NodeView | None = None

    def __post_init__(self) -> None:
        if not self.committed:
            self.committed = [0] * len(self.gpu_total_mib)

    def view(self) -> NodeView:
        if self._view is None or self._view.version != self.version:
            gpus = tuple(
                GpuView(f"{self.name}-gpu{i}", i, self.model, t, c, reserved_mib=c)
                for i, (t, c) in enumerate(zip(self.gpu_total_mib, self.committed, strict=True))
            )
            self._view = NodeView(
                self.name,
                gpus,
                self.capacity_type,
                self.instance_type,
                self.per_gib_hour,
                self.version,
                cpu_allocatable_milli=self.cpu_milli,
                cpu_requested_milli=self.cpu_used,
                memory_allocatable_mib=self.memory_mib,
                memory_requested_mib=self.mem_used,
            )
        return self._view

    def commit(self, grants: list[tuple[int, int]], cpu_milli: int, memory_mib: int) -> None:
        """Take ``(gpu index, MiB)`` grants and the pod's CPU/memory requests."""
        for i, mib in grants:
            self.committed[i] += mib
        self.cpu_used += cpu_milli
        self.mem_used += memory_mib
        self.pods += 1
        self.version += 1

    @property
    def total_mib(self) -> int:
        return sum(self.gpu_total_mib)


def priced_node(
    name: str,
    itype: str,
    capacity: str,
    model: str,
    gpus: int,
    gpu_mib: int,
    cpu_milli: int,
    memory_mib: int,
    prices: PriceBook,
) -> SimNode:
    """A node priced as ``gpus`` GPUs at the stand-in instance's $/GPU-hour."""
    p = prices.node_price(itype, capacity)
    if p is None:
        raise ValueError(f"instance type {itype} missing from the price table")
    per_gpu = float(p.per_gpu_hour)
    return SimNode(
        name,
        itype,
        capacity,
        model,
        (gpu_mib,) * gpus,
        cpu_milli,
        memory_mib,
        per_gpu * gpus,
        per_gpu * GIB / gpu_mib,
    )


def make_cluster(n: int, seed: int, prices: PriceBook, spot_share: float = 0.5) -> list[SimNode]:
    """``n`` Karpenter nodes drawn from INSTANCE_MIX, each spot with ``spot_share``."""
    rng = random.Random(seed)
    nodes = []
    drawn = draw_instances(n, rng, prices, INSTANCE_MIX, spot_share)
    for i, (itype, info, capacity) in enumerate(drawn):
        cpu, mem = CPU_MEM[itype]
        nodes.append(
            priced_node(
                f"node-{i:04d}",
                itype,
                capacity,
                info.gpu_model,
                info.gpus,
                info.gpu_memory_mib,
                cpu * 1000,
                mem * GIB,
                prices,
            )
        )
    return nodes


def read_alibaba_nodes(
    path: Path,
    seed: int,
    prices: PriceBook,
    spot_share: float = 0.5,
    gpu_mib: int | None = None,
    cpu_nodes: bool = False,
) -> list[SimNode]:
    """Nodes from an ``openb_node_list`` CSV. Nodes without GPUs are skipped unless
    ``cpu_nodes`` (then kept, unpriced: only CPU-only pods can use them). ``gpu_mib``:
    every GPU's memory, whatever its model (the trace's unit is a share of one GPU)."""
    rng = random.Random(seed)
    nodes = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            gpus = int(row["gpu"] or 0)
            cpu, mem = int(row["cpu_milli"]), int(row["memory_mib"])
            if gpus <= 0:
                if cpu_nodes:
                    nodes.append(SimNode(row["sn"], "", ON_DEMAND, "", (), cpu, mem, 0.0, None))
                continue
            model = (row.get("model") or "").strip()
            gib, itype = ALIBABA_MODELS.get(model, UNKNOWN_MODEL)
            capacity = SPOT if rng.random() < spot_share else ON_DEMAND
            size = gpu_mib or gib * GIB
            nodes.append(
                priced_node(row["sn"], itype, capacity, model, gpus, size, cpu, mem, prices)
            )
    return nodes


def model_memory(nodes: list[SimNode]) -> dict[str, list[int]]:
    """Per GPU model, the memory of every GPU of that model in the cluster (MiB)."""
    out: dict[str, list[int]] = {}
    for n in nodes:
        out.setdefault(n.model, []).extend(n.gpu_total_mib)
    return out
