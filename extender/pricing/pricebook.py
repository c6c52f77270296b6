"""Price lookups: instance type x capacity type -> $/h, $/GPU-h, $/GPU-GiB-h (exact Decimals).

Order: the instance type's table entry (bundled, or from the override file), else the
override file's per-GPU-model fallback ($/GPU-hour by product name). A lookup that finds
neither is None (unpriced), never a price of 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from pathlib import Path

from extender.pricing.pricefile import (
    ModelPrice,
    PriceFile,
    PriceFileError,
    RawEntry,
    parse_price_text,
    read_price_file,
)

SPOT = "spot"
BUNDLED = "extender/data/prices.json"


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

    per_hour: Decimal  # whole instance (for "gpu-model": per GPU-hour x GPUs)
    per_gpu_hour: Decimal
    per_gib_hour: Decimal  # per GiB of GPU memory (the chargeback anchor)
    source: str  # "table", "spot-file", "spot-discount", "gpu-model"

    @property
    def per_gib_hour_float(self) -> float:
        return float(self.per_gib_hour)


def model_key(name: str) -> str:
    """A GPU product name in one spelling: NVML's ``NVIDIA A10G``, Karpenter's ``a10g`` and
    GKE's ``nvidia-tesla-t4`` become ``a10g`` / ``t4``."""
    words = re.sub(r"[\s_-]+", " ", name.strip().lower()).split()
    while words and words[0] in ("nvidia", "tesla"):
        words.pop(0)
    return " ".join(words)


class PriceBook:
    """Prices by instance type; spot = file price, else on-demand x (1 - discount)."""

    def __init__(
        self,
        table: dict[str, InstancePrice],
        spot_discount: Decimal,
        gpu_models: dict[str, ModelPrice] | None = None,
    ) -> None:
        if not Decimal(0) <= spot_discount < Decimal(1):
            raise ValueError(f"spot discount must be in [0, 1): {spot_discount}")
        self._table = table
        self._discount = spot_discount
        self._models = {model_key(k): v for k, v in (gpu_models or {}).items()}
        self._cache: dict[tuple[str, str, int, int, str], NodePrice | None] = {}

    def instance(self, instance_type: str) -> InstancePrice | None:
        return self._table.get(instance_type)

    def instance_types(self) -> tuple[str, ...]:
        return tuple(sorted(self._table))

    def gpu_model_price(self, gpu_model: str) -> ModelPrice | None:
        """The fallback entry for a GPU product name: the longest file key that is the
        name or a word-prefix of it (``H100 80GB`` prices ``NVIDIA H100 80GB HBM3``)."""
        if not gpu_model or not self._models:
            return None
        key = model_key(gpu_model)
        best = None
        for k, v in self._models.items():
            if (key == k or key.startswith(k + " ")) and (best is None or len(k) > len(best[0])):
                best = (k, v)
        return best[1] if best else None

    def node_price(
        self,
        instance_type: str,
        capacity_type: str,
        gpus: int = 0,
        gpu_memory_mib: int = 0,
        gpu_model: str = "",
    ) -> NodePrice | None:
        """Price of a node's GPUs. ``gpus``/``gpu_memory_mib`` are measured values when the
        agent has reported (they win over the catalog); ``gpu_model`` (measured, or the
        node's label) finds the per-GPU-model fallback. None when nothing prices it."""
        key = (instance_type, capacity_type, gpus, gpu_memory_mib, gpu_model)
        if key not in self._cache:
            self._cache[key] = self._compute(*key)
        return self._cache[key]

    def _compute(
        self, instance_type: str, capacity_type: str, gpus: int, gpu_memory_mib: int, model: str
    ) -> NodePrice | None:
        entry = self._table.get(instance_type)
        if entry is None:
            return self._by_model(capacity_type, gpus, gpu_memory_mib, model)
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

    def _by_model(
        self, capacity_type: str, gpus: int, gpu_memory_mib: int, model: str
    ) -> NodePrice | None:
        """$/GPU-hour from the file's ``gpu_models`` x the node's GPU count; the spot price
        is the file's, else on-demand x (1 - discount)."""
        price = self.gpu_model_price(model)
        if price is None or gpus <= 0 or gpu_memory_mib <= 0:
            return None
        per_gpu = price.on_demand
        if capacity_type == SPOT:
            per_gpu = price.spot if price.spot is not None else per_gpu * (1 - self._discount)
        return NodePrice(per_gpu * gpus, per_gpu, per_gpu * 1024 / gpu_memory_mib, "gpu-model")


def _merge(name: str, raw: RawEntry, base: InstancePrice | None, where: str) -> InstancePrice:
    """A file's entry over the table's (an override may give only the fields it changes)."""
    on_demand = raw.on_demand if raw.on_demand is not None else (base.on_demand if base else None)
    if on_demand is None:
        raise PriceFileError(
            f"{where}: price entry {name!r}: on_demand is missing (a type not in the bundled"
            " table needs on_demand, gpus, gpu_memory_mib)"
        )
    return InstancePrice(
        instance_type=name,
        on_demand=on_demand,
        gpus=raw.gpus if raw.gpus is not None else (base.gpus if base else 0),
        gpu_model=raw.gpu_model if raw.gpu_model is not None else (base.gpu_model if base else ""),
        gpu_memory_mib=(
            raw.gpu_memory_mib
            if raw.gpu_memory_mib is not None
            else (base.gpu_memory_mib if base else 0)
        ),
        spot=raw.spot if raw.spot is not None else (base.spot if base else None),
    )


def bundled_file() -> PriceFile:
    text = resources.files("extender").joinpath("data/prices.json").read_text(encoding="utf-8")
    return parse_price_text(text, BUNDLED, yaml_syntax=False)


def load_pricebook(override: str | None = None, spot_discount: float = 0.6) -> PriceBook:
    """Bundled table, then the override file (JSON or YAML, same shape) on top.

    Raises ``PriceFileError`` (a ValueError) with a one-line message on a bad file."""
    bundled = bundled_file()
    table = {n: _merge(n, raw, None, BUNDLED) for n, raw in bundled.instance_types.items()}
    models = dict(bundled.gpu_models)
    if override:
        extra = read_price_file(Path(override))
        for name, raw in extra.instance_types.items():
            table[name] = _merge(name, raw, table.get(name), override)
        models.update(extra.gpu_models)
    return PriceBook(table, Decimal(str(spot_discount)), models)
