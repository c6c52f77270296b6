"""A node whose instance type the table lacks is priced by its GPU model from the price
file, end to end: agent report, filter, bind, the ledger row's price."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from tests.support import Extender, gpu_pod, running_extender


@pytest.fixture
def ext(tmp_path: Path) -> Iterator[Extender]:
    prices = tmp_path / "prices.yaml"
    prices.write_text('gpu_models:\n  "NVIDIA A10G": "1.25"\n')
    with running_extender(tmp_path, policy="binpack", price_file=str(prices)) as e:
        e.add_node("n-new", "4xA10G:24Gi", instance_type="g99.unlisted")
        yield e


def test_an_unlisted_type_is_priced_by_its_measured_gpu_model(ext: Extender) -> None:
    ext.post("filter", ext.schedule_args(gpu_pod("p1"), ["n-new"]))
    bound = {"PodName": "p1", "PodNamespace": "ml", "PodUID": "uid-p1", "Node": "n-new"}
    assert ext.post("bind", bound).json() == {"Error": ""}
    (row,) = ext.built.service.ledger.for_pod("uid-p1")
    assert row.grant.price_per_hour == Decimal("1.25")  # one whole A10G at the file's price
