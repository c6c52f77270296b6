"""The cluster as ``headroom top`` and the node gauges show it: per node and GPU, what
was measured, what is granted, what is left, how old the numbers are, what it costs.

Plain data from the inventory, read under its lock once per call; nothing here is on
the scheduling path.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from extender.state.inventory import Inventory


@dataclass(frozen=True)
class GpuRow:
    uuid: str
    index: int
    model: str
    mig_profile: str
    total_mib: int
    used_mib: int  # measured on the device (NVML), every process and the driver
    granted_mib: int  # held by active grants
    committed_mib: int  # Σ max(granted, used) + leaks + unattributed (state/committed.py)

    @property
    def headroom_mib(self) -> int:
        """What a new pod could still be given (never below 0)."""
        return max(0, self.total_mib - self.committed_mib)


@dataclass(frozen=True)
class NodeRow:
    name: str
    instance_type: str
    capacity_type: str
    price_per_gpu_hour: Decimal | None  # None: unpriced
    report_age_s: float  # since the agent's last report reached the extender
    gpus: tuple[GpuRow, ...]

    @property
    def headroom_mib(self) -> int:
        return sum(g.headroom_mib for g in self.gpus)


def snapshot(inventory: Inventory, now: float) -> list[NodeRow]:
    """Every node an agent has reported, by name."""
    rows = []
    for name in sorted(inventory.node_names()):
        view, received = inventory.view(name), inventory.received_at(name)
        if view is None or received is None:
            continue
        used = {g.uuid: g.used_mib for g in inventory.measured(name)}
        price = inventory.price(name)
        gpus = tuple(
            GpuRow(
                g.uuid,
                g.index,
                g.model,
                g.mig_profile,
                g.total_mib,
                used.get(g.uuid, 0),
                g.reserved_mib,
                g.committed_mib,
            )
            for g in view.gpus
        )
        rows.append(
            NodeRow(
                name,
                view.instance_type,
                view.capacity_type,
                price.per_gpu_hour if price else None,
                max(0.0, now - received),
                gpus,
            )
        )
    return rows
