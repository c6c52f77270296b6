"""Reading price files: the bundled table and a ``--price-file`` override (JSON or YAML).

Every fault becomes one ``PriceFileError`` whose message names the file and what to fix
(the line for malformed YAML/JSON, the entry and field for a bad value), so the CLI prints
one line and exits 2, never a traceback. Prices are read as exact Decimals: JSON numbers
are parsed as Decimal, YAML floats through their shortest repr (quote a price to be sure).

Shape (docs/pricing.md)::

    instance_types:                 # optional in an override; adds or replaces types
      g5.xlarge: {on_demand: "1.006", spot: "0.40", gpus: 1, gpu_model: A10G,
                  gpu_memory_mib: 22888}
    gpu_models:                     # optional; $/GPU-hour by GPU product name
      NVIDIA A10G: "1.006"          # or {on_demand: "1.006", spot: "0.40"}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml

TOP_KEYS = ("instance_types", "gpu_models", "region", "source")
ENTRY_KEYS = ("on_demand", "spot", "gpus", "gpu_model", "gpu_memory_mib")
MODEL_KEYS = ("on_demand", "spot")


class PriceFileError(ValueError):
    """A price file that cannot be used; the message is one line saying what to fix."""


@dataclass(frozen=True, slots=True)
class RawEntry:
    """One instance type as written: only the fields the file gives (None = not given)."""

    on_demand: Decimal | None = None
    spot: Decimal | None = None
    gpus: int | None = None
    gpu_model: str | None = None
    gpu_memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """$/GPU-hour for one GPU product name (the fallback for types not in the table)."""

    name: str
    on_demand: Decimal
    spot: Decimal | None = None


@dataclass(frozen=True, slots=True)
class PriceFile:
    instance_types: dict[str, RawEntry] = field(default_factory=dict)
    gpu_models: dict[str, ModelPrice] = field(default_factory=dict)


def read_price_file(path: Path) -> PriceFile:
    """Parse and validate ``path`` (YAML when it ends .yaml/.yml, else JSON)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PriceFileError(f"price file {path}: cannot read it: {e}") from None
    return parse_price_text(text, str(path), yaml_syntax=path.suffix in (".yaml", ".yml"))


def parse_price_text(text: str, name: str, *, yaml_syntax: bool) -> PriceFile:
    data = _load_yaml(text, name) if yaml_syntax else _load_json(text, name)
    if not isinstance(data, dict):
        raise PriceFileError(f"{name}: expected a mapping with 'instance_types' or 'gpu_models'")
    _no_unknown(data, TOP_KEYS, name)
    if "instance_types" not in data and "gpu_models" not in data:
        raise PriceFileError(f"{name}: expected 'instance_types' or 'gpu_models' (or both)")
    types = _mapping(data.get("instance_types", {}), f"{name}: 'instance_types'")
    models = _mapping(data.get("gpu_models", {}), f"{name}: 'gpu_models'")
    return PriceFile(
        instance_types={str(k): _entry(str(k), v, name) for k, v in types.items()},
        gpu_models={str(k): _model(str(k), v, name) for k, v in models.items()},
    )


def _load_yaml(text: str, name: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise PriceFileError(f"{name}: malformed YAML: {where}{e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise PriceFileError(f"{name}: malformed YAML: {e}") from None


def _load_json(text: str, name: str) -> Any:
    try:
        return json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as e:
        raise PriceFileError(
            f"{name}: malformed JSON: line {e.lineno}, column {e.colno}: {e.msg}"
        ) from None


def _mapping(value: Any, what: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise PriceFileError(f"{what} must be a mapping, not {type(value).__name__}")
    return value


def _no_unknown(raw: dict[Any, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(str(k) for k in raw if k not in allowed)
    if unknown:
        keys = ", ".join(repr(k) for k in unknown)
        noun = "key" if len(unknown) == 1 else "keys"
        expected = ", ".join(allowed)
        raise PriceFileError(f"{where}: unknown {noun} {keys} (expected one of {expected})")


def _entry(type_name: str, raw: Any, name: str) -> RawEntry:
    where = f"{name}: price entry {type_name!r}"
    if not isinstance(raw, dict):
        raise PriceFileError(f"{where}: expected a mapping of {', '.join(ENTRY_KEYS)}")
    _no_unknown(raw, ENTRY_KEYS, where)
    model = raw.get("gpu_model")
    if model is not None and not isinstance(model, str):
        raise PriceFileError(f"{where}: gpu_model {_show(model)} is not a string")
    return RawEntry(
        on_demand=_price(raw, "on_demand", where),
        spot=_price(raw, "spot", where),
        gpus=_count(raw, "gpus", where),
        gpu_model=model,
        gpu_memory_mib=_count(raw, "gpu_memory_mib", where),
    )


def _model(model: str, raw: Any, name: str) -> ModelPrice:
    where = f"{name}: gpu model {model!r}"
    if not isinstance(raw, dict):
        raw = {"on_demand": raw}
    _no_unknown(raw, MODEL_KEYS, where)
    on_demand = _price(raw, "on_demand", where)
    if on_demand is None:
        raise PriceFileError(f"{where}: on_demand ($/GPU-hour) is missing")
    return ModelPrice(model, on_demand, _price(raw, "spot", where))


def _price(raw: dict[Any, Any], key: str, where: str) -> Decimal | None:
    """A price in USD/h: a decimal number (string or number), finite and not negative."""
    if key not in raw or raw[key] is None:
        return None
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
        raise PriceFileError(f"{where}: {key} {_show(value)} is not a decimal number")
    try:
        if isinstance(value, str):
            d = Decimal(value.strip())
        else:  # a YAML float through its shortest repr, so 1.006 stays 1.006
            d = Decimal(repr(value) if isinstance(value, float) else value)
    except InvalidOperation:
        raise PriceFileError(f"{where}: {key} {_show(value)} is not a decimal number") from None
    if not d.is_finite():
        raise PriceFileError(f"{where}: {key} {_show(value)} is not a finite number")
    if d < 0:
        raise PriceFileError(f"{where}: {key} {_show(value)} is negative")
    return d


def _count(raw: dict[Any, Any], key: str, where: str) -> int | None:
    if key not in raw or raw[key] is None:
        return None
    value = raw[key]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise PriceFileError(f"{where}: {key} {_show(value)} is not a whole number >= 0")


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    return json.dumps(text)
