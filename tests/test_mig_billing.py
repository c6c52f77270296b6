"""MIG instances are billed their memory slices' share of the parent GPU, the parent's
full price enters the node's bill, and ``Σ charges + idle = node bill`` to the cent, on
an all-MIG and on a mixed p5.48xlarge (bundled price $55.04/h, 8 x H100 = $6.88 per
GPU-hour): agent reports, filter, bind and ``/v1/chargeback`` over real HTTP, a real
SQLite ledger. Worked numbers are in docs/billing.md."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import msgspec
import pytest

from extender.pricing.mig import memory_slices, mig_share
from extender.wire.report import GpuReport, MigReport, NodeReport
from tests.support import Extender, gpu_pod, running_extender

H = 3600.0
H100_MIB = 81920  # report the parent as 80 GiB: round shares in the worked numbers
LABELS = {
    "node.kubernetes.io/instance-type": "p5.48xlarge",
    "karpenter.sh/capacity-type": "on-demand",
}


@pytest.mark.parametrize(
    ("profile", "parent_mib", "slices"),
    [
        ("1g.10gb", 81559, 1),  # H100 80GB, NVML's size
        ("1g.20gb", 81559, 2),
        ("2g.20gb", 81559, 2),
        ("3g.40gb", 81559, 4),
        ("4g.40gb", 81559, 4),
        ("7g.80gb", 81559, 8),
        ("1g.5gb", 40960, 1),  # A100 40GB
        ("3g.20gb", 40960, 4),
        ("1g.18gb", 143771, 1),  # H200 141GB
        ("3g.71gb", 143771, 4),
        ("1g.6gb", 24576, 2),  # A30: 4 slices of its own, each two eighths
        ("1g.10gb+me", 81559, 1),  # with the media extensions
    ],
)
def test_memory_slices_of_nvidia_profiles(profile: str, parent_mib: int, slices: int) -> None:
    assert memory_slices(profile, parent_mib) == slices
    assert mig_share(profile, 9856, parent_mib) == Decimal(slices) / 8


def test_a_profile_without_a_size_is_billed_by_memory() -> None:
    assert memory_slices("custom", H100_MIB) is None
    assert mig_share("custom", 20480, H100_MIB) == Decimal("0.25")
    assert mig_share("custom", 9856, 0) == 1  # parent unknown: the whole GPU


def mig_gpu(node: str, i: int, instances: int) -> GpuReport:
    mig = [MigReport(f"MIG-{node}-{i}-{j}", "1g.10gb", 9856, 10) for j in range(instances)]
    return GpuReport(
        f"GPU-{node}-{i}", i, "NVIDIA H100 80GB HBM3", H100_MIB, 100, mig_enabled=True, mig=mig
    )


def plain_gpu(node: str, i: int) -> GpuReport:
    return GpuReport(f"GPU-{node}-{i}", i, "NVIDIA H100 80GB HBM3", H100_MIB, 0)


def report(ext: Extender, node: str, gpus: list[GpuReport]) -> None:
    rep = NodeReport(node=node, sampled_at=ext.clock.now(), gpus=gpus, labels=LABELS)
    ext.client.post("/v1/reports", content=msgspec.json.encode(rep)).raise_for_status()


def mig_pod(name: str) -> dict:
    pod = gpu_pod(name, gpus=0)
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
    return pod


def bind(ext: Extender, pod: dict, node: str) -> None:
    ext.post("filter", ext.schedule_args(pod, [node]))
    name = pod["metadata"]["name"]
    args = {"PodName": name, "PodNamespace": "ml", "PodUID": f"uid-{name}", "Node": node}
    assert ext.post("bind", args).json() == {"Error": ""}


@pytest.fixture
def ext(tmp_path: Path) -> Iterator[Extender]:
    with running_extender(tmp_path, stale_after=10 * H) as e:
        yield e


def node_line(body: dict, node: str) -> dict:
    (line,) = [n for n in body["nodes"] if n["node"] == node]
    return line


def chargeback(ext: Extender, t0: float) -> dict:
    ext.built.service.writer.flush()
    params = {"from": str(t0), "to": str(t0 + H), "group_by": "pod"}
    r = ext.client.get("/v1/chargeback", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_all_mig_node_bills_the_parents_and_each_instance_an_eighth(ext: Extender) -> None:
    t0 = ext.clock.now()
    report(ext, "all-mig", [mig_gpu("all-mig", i, 7) for i in range(8)])
    for name in ("m1", "m2", "m3"):
        bind(ext, mig_pod(name), "all-mig")
    (row,) = ext.built.service.ledger.for_pod("uid-m1")
    assert row.grant.price_per_hour == Decimal("0.86")  # 6.88 / 8, not a whole H100
    ext.clock.advance(H)
    body = chargeback(ext, t0)
    costs = {g["key"]: g["cost"] for g in body["groups"]}
    assert costs == {"ml/m1": "0.86", "ml/m2": "0.86", "ml/m3": "0.86"}
    line = node_line(body, "all-mig")
    # the eight parents' full price, the 53 idle slices of 56 as idle
    assert (line["cost"], line["charged"], line["idle"]) == ("55.04", "2.58", "52.46")
    assert line["oversubscribed"] is False
    assert Decimal(line["charged"]) + Decimal(line["idle"]) == Decimal(line["cost"])


def test_mixed_node_bills_mig_and_plain_gpus_to_the_cent(ext: Extender) -> None:
    t0 = ext.clock.now()
    gpus = [mig_gpu("mixed", 0, 7)] + [plain_gpu("mixed", i) for i in range(1, 8)]
    report(ext, "mixed", gpus)
    bind(ext, mig_pod("m"), "mixed")
    bind(ext, gpu_pod("s", memory="40Gi"), "mixed")  # half of one plain H100
    ext.clock.advance(H)
    body = chargeback(ext, t0)
    costs = {g["key"]: g["cost"] for g in body["groups"]}
    assert costs == {"ml/m": "0.86", "ml/s": "3.44"}
    line = node_line(body, "mixed")
    # seven idle plain GPUs and the idle slices are idle, not 0.00
    assert (line["cost"], line["charged"], line["idle"]) == ("55.04", "4.30", "50.74")
    assert Decimal(line["charged"]) + Decimal(line["idle"]) == Decimal(line["cost"])
