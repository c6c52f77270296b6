"""Build extender/data/prices.json: on-demand USD/h (us-east-1, Linux) for every AWS
instance type with whole NVIDIA GPUs, with its GPU count, model and memory per GPU.

Not in the request path: run by ``regen.sh`` beside it (docs/pricing.md). Inputs, each
a file an ordinary package client fetched:

- prices, either
  - ``--karpenter-zip``: the Go module zip of aws/karpenter-provider-aws (``go mod
    download``); its ``pkg/providers/pricing/zz_generated.pricing_aws.go`` is AWS's Price
    List (GetProducts: AmazonEC2, regionCode us-east-1, operatingSystem Linux,
    preInstalledSw NA, capacitystatus Used, marketoption OnDemand, tenancy Shared /
    productFamily Compute Instance; bare metal: tenancy Dedicated / Compute Instance (bare
    metal)) as Karpenter's ``hack/code/prices_gen`` wrote it, or
  - ``--offer-csv``: AWS's bulk offer file for AmazonEC2 us-east-1 in CSV, filtered the
    same way (TermType OnDemand, Operating System Linux, Tenancy Shared, Pre Installed S/W
    NA, CapacityStatus Used, Unit Hrs; Dedicated for ``.metal``);
- GPU specs: ``--moto-wheel`` (repeatable, first wins): a moto wheel from PyPI, whose
  ``moto/ec2/resources/instance_types.json[.gz]`` is EC2 DescribeInstanceTypes output
  (``GpuInfo``: count, name, manufacturer, MiB per GPU).

A type is written only when both a price and a whole-GPU NVIDIA spec are found: no price
is ever made up. Types left out for want of either are listed on stderr.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import re
import sys
import zipfile
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

PRICING_GO = "pkg/providers/pricing/zz_generated.pricing_aws.go"
MOTO_SPECS = ("moto/ec2/resources/instance_types.json.gz", "moto/ec2/resources/instance_types.json")
REGION = "us-east-1"
OFFER_URL = (
    "https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/us-east-1/index.csv"
)


def karpenter_prices(zip_path: Path) -> tuple[dict[str, Decimal], str]:
    """us-east-1 on-demand prices from Karpenter's generated table, as the decimal text it
    prints (``%f``: six decimals), and its ``generated at`` stamp."""
    with zipfile.ZipFile(zip_path) as z:
        name = next(n for n in z.namelist() if n.endswith("/" + PRICING_GO))
        src = z.read(name).decode()
    stamp = re.search(r"// generated at (\S+) for (\S+)", src)
    if stamp is None or stamp.group(2) != REGION:
        raise SystemExit(f"{zip_path}: no 'generated at ... for {REGION}' line in {PRICING_GO}")
    block = re.search(r'"us-east-1": \{(.*?)\n\t\},', src, re.S)
    if block is None:
        raise SystemExit(f"{zip_path}: no us-east-1 block in {PRICING_GO}")
    prices = {t: Decimal(p) for t, p in re.findall(r'"([a-z0-9.-]+)":\s*([0-9.]+)', block.group(1))}
    return prices, stamp.group(1)


def offer_csv_prices(path: Path) -> tuple[dict[str, Decimal], str]:
    """On-demand prices from the bulk offer CSV (five preamble lines, then a header)."""
    prices: dict[str, Decimal] = {}
    with open(path, newline="", encoding="utf-8") as f:
        preamble = [next(f) for _ in range(5)]
        stamp = next((ln.split(",")[1].strip('"\n') for ln in preamble if "Publication" in ln), "")
        for row in csv.DictReader(f):
            itype = row.get("Instance Type", "")
            tenancy = "Dedicated" if itype.endswith(".metal") else "Shared"
            if (
                row.get("TermType") == "OnDemand"
                and row.get("Location Type") in (None, "AWS Region")
                and row.get("Operating System") == "Linux"
                and row.get("Tenancy") == tenancy
                and row.get("Pre Installed S/W") == "NA"
                and row.get("CapacityStatus") == "Used"
                and row.get("Unit") == "Hrs"
                and itype
            ):
                price = Decimal(row["PricePerUnit"])
                if price > 0:
                    prices[itype] = price
    return prices, stamp


def moto_specs(wheels: Iterable[Path]) -> dict[str, tuple[dict[str, Any], str]]:
    """Instance type -> (GpuInfo, the wheel it came from); the first wheel that has it wins."""
    specs: dict[str, tuple[dict[str, Any], str]] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            name = next(n for n in MOTO_SPECS if n in z.namelist())
            raw = z.read(name)
        data = json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)
        for itype, info in data.items():
            if "GpuInfo" in info and itype not in specs:
                specs[itype] = (info["GpuInfo"], wheel.name)
    return specs


def whole_nvidia(gpu_info: dict[str, Any]) -> tuple[int, str, int] | None:
    """(count, model, MiB per GPU) for one whole-GPU NVIDIA model; None for fractional
    GPUs (g6f, gr6f: Count 0), other makers, or mixed models."""
    gpus = gpu_info.get("Gpus") or []
    if len(gpus) != 1:
        return None
    g = gpus[0]
    count, mib = int(g.get("Count", 0)), int(g.get("MemoryInfo", {}).get("SizeInMiB", 0))
    if g.get("Manufacturer") != "NVIDIA" or count < 1 or mib < 1:
        return None
    return count, str(g["Name"]), mib


def family(itype: str) -> str:
    return itype.split(".", 1)[0]


def size_order(itype: str) -> tuple[str, int, str]:
    """g5.xlarge < g5.2xlarge < g5.48xlarge < g5.metal (then by name)."""
    size = itype.split(".", 1)[1]
    m = re.fullmatch(r"(\d*)xlarge", size)
    rank = int(m.group(1) or 1) if m else (10_000 if size == "metal" else 0)
    return family(itype), rank, size


def build(
    prices: dict[str, Decimal],
    specs: dict[str, tuple[dict[str, Any], str]],
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    table: dict[str, dict[str, Any]] = {}
    skipped: list[str] = []
    for itype in sorted(specs, key=size_order):
        spec = whole_nvidia(specs[itype][0])
        if spec is None:
            continue
        if itype not in prices:
            skipped.append(f"{itype}: no on-demand price in the price source")
            continue
        count, model, mib = spec
        table[itype] = {
            "on_demand": _text(prices[itype]),
            "gpus": count,
            "gpu_model": model,
            "gpu_memory_mib": mib,
        }
    return table, skipped


def _text(d: Decimal) -> str:
    """The price as the source wrote it, less trailing zeros (``0.526000`` -> ``0.526``)."""
    return format(d.normalize(), "f")


def render(table: dict[str, dict[str, Any]], source: dict[str, Any]) -> str:
    """JSON with one instance type a line, so a regenerated table diffs by row."""
    width = max(len(json.dumps(t)) for t in table) + 1
    rows = [
        f"    {json.dumps(t) + ':':<{width}} {json.dumps(e, separators=(', ', ': '))}"
        for t, e in table.items()
    ]
    head = json.dumps({"source": source, "region": REGION}, indent=2)[:-2]
    return head + ',\n  "instance_types": {\n' + ",\n".join(rows) + "\n  }\n}\n"


def families(table: dict[str, Any]) -> Iterator[tuple[str, int]]:
    counts: dict[str, int] = {}
    for t in table:
        counts[family(t)] = counts.get(family(t), 0) + 1
    yield from sorted(counts.items())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--karpenter-zip", type=Path, help="aws/karpenter-provider-aws module zip")
    src.add_argument("--offer-csv", type=Path, help=f"AWS bulk offer CSV ({OFFER_URL})")
    ap.add_argument("--karpenter-version", default="", help="recorded in the table's source")
    ap.add_argument("--moto-wheel", type=Path, action="append", required=True)
    a = ap.parse_args(argv)
    if a.karpenter_zip:
        prices, stamp = karpenter_prices(a.karpenter_zip)
        price_source = (
            f"github.com/aws/karpenter-provider-aws@{a.karpenter_version} {PRICING_GO}"
            f" (AWS Price List GetProducts, generated at {stamp} for {REGION})"
        )
    else:
        prices, stamp = offer_csv_prices(a.offer_csv)
        price_source = f"AWS Price List bulk offer file {OFFER_URL} (published {stamp})"
    specs = moto_specs(a.moto_wheel)
    table, skipped = build(prices, specs)
    source = {
        "prices": price_source,
        "filter": "Linux, Shared tenancy (Dedicated for .metal), no pre-installed software,"
        " capacity status Used, OnDemand; USD per instance-hour",
        "gpu_specs": "EC2 DescribeInstanceTypes GpuInfo as bundled in "
        + ", ".join(w.name for w in a.moto_wheel)
        + " (moto/ec2/resources/instance_types.json), first wheel wins",
        "selection": "every type with whole NVIDIA GPUs of one model that has a price",
        "regenerate": "tests/tools/prices/regen.sh (docs/pricing.md)",
    }
    sys.stdout.write(render(table, source))
    for line in skipped:
        print(f"gen_prices: left out {line}", file=sys.stderr)
    summary = ", ".join(f"{f} {n}" for f, n in families(table))
    print(f"gen_prices: {len(table)} types: {summary}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
