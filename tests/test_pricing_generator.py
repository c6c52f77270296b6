"""tests/tools/prices/gen_prices.py on small inputs shaped like the real ones: the
Karpenter module's generated Go table, moto's DescribeInstanceTypes dump, AWS's offer CSV."""

from __future__ import annotations

import gzip
import json
import zipfile
from decimal import Decimal
from pathlib import Path

import pytest

from extender.pricing.pricefile import parse_price_text
from tests.tools.prices import gen_prices

GO = """package pricing

// generated at 2026-07-20T13:44:30Z for us-east-1

var InitialOnDemandPricesAWS = map[string]map[ec2types.InstanceType]float64{
\t// us-east-1
\t"us-east-1": {
\t\t// g6e family
\t\t"g6e.12xlarge": 10.492640, "g6e.xlarge": 1.861000,
\t\t// g6f family
\t\t"g6f.large": 0.202000,
\t\t// m5 family
\t\t"m5.large": 0.096000,
\t},
}
"""


def gpu(count: int, name: str, mib: int, maker: str = "NVIDIA") -> dict[str, object]:
    g = {"Count": count, "Manufacturer": maker, "Name": name, "MemoryInfo": {"SizeInMiB": mib}}
    return {"GpuInfo": {"Gpus": [g]}}


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    kz = tmp_path / "karpenter.zip"
    with zipfile.ZipFile(kz, "w") as z:
        z.writestr("github.com/aws/karpenter-provider-aws@v1/" + gen_prices.PRICING_GO, GO)
    specs = {
        "g6e.xlarge": gpu(1, "L40S", 45776),
        "g6e.12xlarge": gpu(4, "L40S", 45776),
        "g6f.large": gpu(0, "L4", 2861),  # a fraction of a GPU: left out
        "p5e.48xlarge": gpu(8, "H200", 144384),  # no price: left out
        "g4ad.xlarge": gpu(1, "Radeon Pro V520", 8192, "AMD"),
        "m5.large": {},
    }
    wheel = tmp_path / "moto-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(gen_prices.MOTO_SPECS[0], gzip.compress(json.dumps(specs).encode()))
    return kz, wheel


def test_generates_a_loadable_table(
    inputs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    kz, wheel = inputs
    argv = ["--karpenter-zip", str(kz), "--karpenter-version", "v1", "--moto-wheel", str(wheel)]
    assert gen_prices.main(argv) == 0
    out, err = capsys.readouterr()
    table = parse_price_text(out, "generated", yaml_syntax=False)
    assert list(table.instance_types) == ["g6e.xlarge", "g6e.12xlarge"]
    e = table.instance_types["g6e.12xlarge"]
    assert (e.on_demand, e.gpus, e.gpu_model, e.gpu_memory_mib) == (
        Decimal("10.49264"),
        4,
        "L40S",
        45776,
    )
    assert "generated at 2026-07-20T13:44:30Z" in json.loads(out)["source"]["prices"]
    assert "left out p5e.48xlarge: no on-demand price" in err


def test_offer_csv(tmp_path: Path) -> None:
    head = (
        '"FormatVersion","v1.0"\n"Disclaimer","x"\n"Publication Date","2026-11-01T00:00:00Z"\n'
        '"Version","1"\n"OfferCode","AmazonEC2"\n'
        '"TermType","PricePerUnit","Unit","Location Type","Instance Type","Operating System",'
        '"Tenancy","Pre Installed S/W","CapacityStatus"\n'
    )
    rows = [
        "OnDemand,1.8610000000,Hrs,AWS Region,g6e.xlarge,Linux,Shared,NA,Used",
        "OnDemand,9.9,Hrs,AWS Region,g6e.xlarge,Windows,Shared,NA,Used",
        "OnDemand,9.9,Hrs,AWS Region,g6e.xlarge,Linux,Dedicated,NA,Used",
        "OnDemand,9.9,Hrs,AWS Region,g6e.xlarge,Linux,Shared,SQL Web,Used",
        "OnDemand,0.0,Hrs,AWS Region,g6e.xlarge,Linux,Shared,NA,UnusedCapacityReservation",
        "Reserved,0.5,Hrs,AWS Region,g6e.xlarge,Linux,Shared,NA,Used",
        "OnDemand,7.824,Hrs,AWS Region,g4dn.metal,Linux,Dedicated,NA,Used",
    ]
    f = tmp_path / "index.csv"
    f.write_text(head + "\n".join(rows) + "\n")
    prices, stamp = gen_prices.offer_csv_prices(f)
    assert prices == {"g6e.xlarge": Decimal("1.861"), "g4dn.metal": Decimal("7.824")}
    assert stamp == "2026-11-01T00:00:00Z"
