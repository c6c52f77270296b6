"""The bundled price table: every current AWS GPU family, priced from the table with
worked numbers, and the per-GPU-model fallback of a ``--price-file`` (docs/pricing.md)."""

from __future__ import annotations

import json
from decimal import Decimal
from importlib import resources
from pathlib import Path

import pytest

from extender.pricing import NodePrice, load_pricebook
from extender.pricing.pricebook import bundled_file, model_key

FAMILIES = (
    "g4dn",
    "g5",
    "g5g",
    "g6",
    "g6e",
    "gr6",
    "p3",
    "p4d",
    "p4de",
    "p5",
    "p5en",
    "p6-b200",
    "p6-b300",
)
# every size of each family that the price source (Karpenter's generated AWS table) lists
SIZES = {
    "g4dn": 7,
    "g5": 8,
    "g5g": 6,
    "g6": 8,
    "g6e": 8,
    "gr6": 2,
    "p3": 3,
    "p4d": 1,
    "p4de": 1,
    "p5": 2,
    "p5en": 1,
    "p6-b200": 1,
    "p6-b300": 1,
}


def test_every_current_gpu_family_is_in_the_table() -> None:
    book = load_pricebook()
    types = book.instance_types()
    for fam in FAMILIES:
        sized = [t for t in types if t.split(".")[0] == fam]
        assert len(sized) == SIZES[fam], (fam, sized)
    for t in types:
        e = book.instance(t)
        assert e is not None
        assert e.on_demand > 0 and e.gpus >= 1 and e.gpu_memory_mib > 0 and e.gpu_model, t


def test_table_records_its_source() -> None:
    raw = json.loads(resources.files("extender").joinpath("data/prices.json").read_text())
    assert raw["region"] == "us-east-1"
    assert "karpenter-provider-aws" in raw["source"]["prices"]
    assert "DescribeInstanceTypes" in raw["source"]["gpu_specs"]
    assert raw["source"]["regenerate"].startswith("tests/tools/prices/regen.sh")
    # strings, never floats: the bundled prices are exact decimals
    assert all(isinstance(e["on_demand"], str) for e in raw["instance_types"].values())
    assert bundled_file().gpu_models == {}


# (instance type, capacity, $/h, $/GPU-h, $/GiB-h, source): worked from the table
# g6e.4xlarge: 1 x L40S, 45776 MiB, $3.00424/h -> 3.00424 x 1024 / 45776 per GiB-hour
CASES = [
    ("g6e.4xlarge", "on-demand", "3.00424", "3.00424", "0.0672042502621461", "table"),
    ("g6e.4xlarge", "spot", "1.201696", "1.201696", "0.0268817001048584", "spot-discount"),
    ("p5.48xlarge", "on-demand", "55.04", "6.88", "0.086", "table"),
    ("g4dn.12xlarge", "on-demand", "3.912", "0.978", "0.061125", "table"),
    ("p6-b300.48xlarge", "reserved", "142.416", "17.802", "0.0662785340314136", "table"),
]


@pytest.mark.parametrize(("itype", "cap", "hourly", "per_gpu", "per_gib", "source"), CASES)
def test_worked_prices(
    itype: str, cap: str, hourly: str, per_gpu: str, per_gib: str, source: str
) -> None:
    p = load_pricebook().node_price(itype, cap)
    assert p is not None
    assert p.per_hour == Decimal(hourly)
    assert p.per_gpu_hour == Decimal(per_gpu)
    assert p.per_gib_hour.quantize(Decimal("1e-16")) == Decimal(per_gib)
    assert p.source == source
    assert all(isinstance(v, Decimal) for v in (p.per_hour, p.per_gpu_hour, p.per_gib_hour))


def test_measured_memory_wins_over_the_catalog() -> None:
    # the agent saw 46068 MiB on the L40S: the GiB price follows what was measured
    p = load_pricebook().node_price("g6e.4xlarge", "on-demand", gpus=1, gpu_memory_mib=46068)
    assert p is not None and p.per_gib_hour == Decimal("3.00424") * 1024 / 46068


def test_unknown_type_is_unpriced_not_zero() -> None:
    book = load_pricebook()
    assert book.node_price("p5e.48xlarge", "on-demand", gpus=8, gpu_memory_mib=144384) is None
    assert book.node_price("", "", gpus=1, gpu_memory_mib=24576, gpu_model="NVIDIA A10G") is None


def _fallback(tmp_path: Path) -> str:
    f = tmp_path / "prices.yaml"
    f.write_text(
        "gpu_models:\n"
        '  NVIDIA A10G: "1.006"\n'
        '  NVIDIA L4: {on_demand: "0.70", spot: "0.28"}\n'
        '  H100 80GB: "6.88"\n'
    )
    return str(f)


def test_fallback_by_gpu_model(tmp_path: Path) -> None:
    book = load_pricebook(_fallback(tmp_path))
    # an on-prem box with 4 x A10G (NVML's product name): $1.006 per GPU-hour
    p = book.node_price("custom-a10g", "", gpus=4, gpu_memory_mib=24576, gpu_model="NVIDIA A10G")
    assert p == NodePrice(
        Decimal("4.024"), Decimal("1.006"), Decimal("1.006") * 1024 / 24576, "gpu-model"
    )
    assert p.per_gib_hour.quantize(Decimal("1e-8")) == Decimal("0.04191667")
    # Karpenter's lower-case label spells the same model
    q = book.node_price("custom-a10g", "on-demand", gpus=1, gpu_memory_mib=24576, gpu_model="a10g")
    assert q is not None and q.per_gpu_hour == Decimal("1.006")


def test_fallback_for_a_gke_spot_node(tmp_path: Path) -> None:
    from extender.state.nodefacts import facts_from_labels

    labels = {
        "node.kubernetes.io/instance-type": "g2-standard-24",
        "cloud.google.com/gke-nodepool": "l4-spot",
        "cloud.google.com/gke-spot": "true",
        "cloud.google.com/gke-accelerator": "nvidia-l4",
    }
    facts = facts_from_labels("gke-l4-0", labels)
    assert (facts.capacity_type, facts.gpu_model_hint) == ("spot", "nvidia-l4")
    book = load_pricebook(_fallback(tmp_path))
    p = book.node_price(
        facts.instance_type, facts.capacity_type, 2, 22888, gpu_model=facts.gpu_model_hint
    )
    # 2 x L4 at the file's spot $0.28 per GPU-hour
    assert p is not None
    assert (p.per_hour, p.per_gpu_hour, p.source) == (Decimal("0.56"), Decimal("0.28"), "gpu-model")
    assert p.per_gib_hour.quantize(Decimal("1e-10")) == Decimal("0.0125270884")


def test_fallback_spot_without_a_spot_price_takes_the_discount(tmp_path: Path) -> None:
    book = load_pricebook(_fallback(tmp_path), spot_discount=0.6)
    p = book.node_price("x", "spot", gpus=1, gpu_memory_mib=24576, gpu_model="NVIDIA A10G")
    assert p is not None and p.per_gpu_hour == Decimal("0.4024")


def test_fallback_picks_the_longest_word_prefix(tmp_path: Path) -> None:
    book = load_pricebook(_fallback(tmp_path))
    p = book.node_price("x", "", gpus=8, gpu_memory_mib=81559, gpu_model="NVIDIA H100 80GB HBM3")
    assert p is not None and p.per_gpu_hour == Decimal("6.88")
    # "H100" alone is not "H100 80GB"; nothing prices it
    assert book.node_price("x", "", gpus=1, gpu_memory_mib=95830, gpu_model="NVIDIA H100") is None
    # a word prefix, not a string prefix: L40S is not L4
    assert book.node_price("x", "", gpus=1, gpu_memory_mib=46068, gpu_model="NVIDIA L40S") is None


def test_fallback_needs_a_gpu_count(tmp_path: Path) -> None:
    book = load_pricebook(_fallback(tmp_path))
    assert book.node_price("x", "", gpu_model="NVIDIA A10G") is None


def test_table_wins_over_the_fallback(tmp_path: Path) -> None:
    book = load_pricebook(_fallback(tmp_path))
    p = book.node_price("g5.xlarge", "on-demand", 1, 22888, gpu_model="NVIDIA A10G")
    assert p is not None and p.source == "table"


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA A10G", "a10g"),
        ("a10g", "a10g"),
        ("nvidia-tesla-t4", "t4"),
        ("Tesla T4", "t4"),
        ("nvidia-h100-80gb", "h100 80gb"),
        ("NVIDIA H100 80GB HBM3", "h100 80gb hbm3"),
        ("RTX PRO Server 6000", "rtx pro server 6000"),
    ],
)
def test_model_key(name: str, key: str) -> None:
    assert model_key(name) == key


def test_override_adds_and_replaces_types(tmp_path: Path) -> None:
    f = tmp_path / "o.json"
    f.write_text(
        json.dumps(
            {
                "instance_types": {
                    "g5.xlarge": {"spot": "0.4"},
                    "p5e.48xlarge": {
                        "on_demand": "60.00",
                        "gpus": 8,
                        "gpu_model": "H200",
                        "gpu_memory_mib": 144384,
                    },
                }
            }
        )
    )
    book = load_pricebook(str(f))
    spot = book.node_price("g5.xlarge", "spot")
    assert spot is not None and (spot.per_hour, spot.source) == (Decimal("0.4"), "spot-file")
    p = book.node_price("p5e.48xlarge", "on-demand")
    assert p is not None and p.per_gpu_hour == Decimal("7.5")
