"""Price lookups: instance type x capacity type -> $/h, $/GPU-h, $/GPU-GiB-h (exact Decimals)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

SPOT = "spot"


@dataclass(frozen=True, slots=True)
class InstancePrice:
    instance_type: str
    on_demand: Decimal  # USD/h for the whole instance
    gpus: int
    gpu_model: str = ""
    gpu_memory_mib: int = 0
    spot: Decimal | None = None  # USD/h when known (file); else derived from the discount


@dataclass(frozen=True, slots=True)
class NodePrice:
    """The price of one node's GPUs, as charged to the pods on it."""

    per_hour: Decimal  # whole instance
    per_gpu_hour: Decimal
    per_gib_hour: Decimal  # per GiB of GPU memory (the chargeback anchor)
    source: str  # "table", "override", "spot-file", "spot-discount"

    @property
    def per_gib_hour_float(self) -> float:
        return float(self.per_gib_hour)


class PriceBook:
    """Prices by instance type; spot = file price, else on-demand x (1 - discount)."""

    def __init__(self, table: dict[str, InstancePrice], spot_discount: Decimal) -> None:
        if not Decimal(0) <= spot_discount < Decimal(1):
            raise ValueError(f"spot discount must be in [0, 1): {spot_discount}")
        self._table = table
        self._discount = spot_discount
        self._cache: dict[tuple[str, str, int, int], NodePrice | None] = {}

    def instance(self, instance_type: str) -> InstancePrice | None:
        return self._table.get(instance_type)

    def node_price(
        self, instance_type: str, capacity_type: str, gpus: int = 0, gpu_memory_mib: int = 0
    ) -> NodePrice | None:
        """Price of a node's GPUs. ``gpus``/``gpu_memory_mib`` are measured values when the
        agent has reported (they win over the catalog). None when the type is unknown."""
        key = (instance_type, capacity_type, gpus, gpu_memory_mib)
        if key not in self._cache:
            self._cache[key] = self._compute(instance_type, capacity_type, gpus, gpu_memory_mib)
        return self._cache[key]

    def _compute(
        self, instance_type: str, capacity_type: str, gpus: int, gpu_memory_mib: int
    ) -> NodePrice | None:
        entry = self._table.get(instance_type)
        if entry is None:
            return None
        hourly, source = entry.on_demand, "table"
        if capacity_type == SPOT:
            if entry.spot is not None:
                hourly, source = entry.spot, "spot-file"
            else:
                hourly, source = entry.on_demand * (1 - self._discount), "spot-discount"
        n = gpus or entry.gpus
        mem = gpu_memory_mib or entry.gpu_memory_mib
        if n <= 0 or mem <= 0:
            return None
        per_gpu = hourly / n
        return NodePrice(hourly, per_gpu, per_gpu * 1024 / mem, source)


def _entry(name: str, raw: dict[str, Any], base: InstancePrice | None) -> InstancePrice:
    def get(key: str, default: Any) -> Any:
        return raw.get(key, default)

    try:
        return InstancePrice(
            instance_type=name,
            on_demand=Decimal(str(get("on_demand", base.on_demand if base else None))),
            gpus=int(get("gpus", base.gpus if base else 0)),
            gpu_model=str(get("gpu_model", base.gpu_model if base else "")),
            gpu_memory_mib=int(get("gpu_memory_mib", base.gpu_memory_mib if base else 0)),
            spot=Decimal(str(raw["spot"])) if "spot" in raw else (base.spot if base else None),
        )
    except (TypeError, ValueError, ArithmeticError) as e:
        raise ValueError(f"price entry {name!r}: {e}") from None


def _read(path: Path) -> dict[str, Any]:
    text = path.read_text()
    data = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("instance_types"), dict):
        raise ValueError(f"{path}: expected a mapping with 'instance_types'")
    return data


def load_pricebook(override: str | None = None, spot_discount: float = 0.6) -> PriceBook:
    """Bundled table, then the override file (JSON or YAML, same shape) on top."""
    bundled = json.loads(resources.files("extender").joinpath("data/prices.json").read_text())
    table: dict[str, InstancePrice] = {
        name: _entry(name, raw, None) for name, raw in bundled["instance_types"].items()
    }
    if override:
        for name, raw in _read(Path(override))["instance_types"].items():
            table[name] = _entry(name, raw, table.get(name))
    return PriceBook(table, Decimal(str(spot_discount)))
