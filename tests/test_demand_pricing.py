"""Reading what a pod asks for, and what a node's GPU memory costs."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import msgspec
import pytest

from extender.core.quantity import quantity_to_mib
from extender.pricing import load_pricebook
from extender.state.demand import (
    CapacityPref,
    DemandError,
    GpuDemand,
    demand_of,
    states_preferences,
)
from extender.wire.protocol import Pod
from tests.support import gpu_pod


def pod(d: dict) -> Pod:
    return msgspec.convert(d, Pod)


@pytest.mark.parametrize(
    ("text", "mib"), [("20Gi", 20480), ("1500Mi", 1500), ("16G", 15259), ("1", 1), ("0.5Gi", 512)]
)
def test_quantities_round_up_to_mib(text: str, mib: int) -> None:
    assert quantity_to_mib(text) == mib


def test_classic_request_with_memory_annotation() -> None:
    d = demand_of(pod(gpu_pod("p", gpus=2, memory="20Gi")))
    assert d == GpuDemand(count=2, memory_mib=20480)


def test_whole_gpu_without_annotation_and_init_containers_take_max() -> None:
    p = gpu_pod("p", gpus=1)
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "3"}}}]
    assert demand_of(pod(p)) == GpuDemand(count=3)


def test_no_gpu_pod_and_dra_pod() -> None:
    assert not demand_of(pod(gpu_pod("p", gpus=0))).wants_gpu
    p = gpu_pod("p", gpus=0)
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    d = demand_of(pod(p))
    assert d.wants_gpu and d.count == 0 and d.dra_claims == ("gpu",)


def test_mig_and_capacity_preferences() -> None:
    p = gpu_pod("p", gpus=0)
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
    assert demand_of(pod(p)).mig_profile == "1g.10gb"
    dnd = gpu_pod("p", annotations={"karpenter.sh/do-not-disrupt": "true"})
    assert demand_of(pod(dnd)).capacity is CapacityPref.ON_DEMAND
    spot = gpu_pod("p", annotations={"headroom.dev/capacity-type": "spot"})
    assert demand_of(pod(spot)).capacity is CapacityPref.SPOT


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"headroom.dev/gpu-memory": "lots"}, "headroom.dev/gpu-memory: not a Kubernetes quantity"),
        ({"headroom.dev/gpu-memory": "0"}, "must be more than 0"),
        ({"headroom.dev/capacity-type": "cheap"}, "'cheap' is not one of spot, on-demand, any"),
    ],
)
def test_malformed_requests_say_what_is_wrong(annotations: dict, message: str) -> None:
    with pytest.raises(DemandError, match=message):
        demand_of(pod(gpu_pod("p", annotations=annotations)))


def test_prices_from_the_bundled_table() -> None:
    book = load_pricebook()
    p5 = book.node_price("p5.48xlarge", "on-demand")
    assert p5 is not None
    assert p5.per_hour == Decimal("55.04") and p5.per_gpu_hour == Decimal("6.88")
    assert p5.per_gib_hour == Decimal("6.88") / 80
    spot = book.node_price("g5.12xlarge", "spot")
    assert spot is not None and spot.per_hour == Decimal("5.672") * Decimal("0.4")
    assert book.node_price("m5.large", "on-demand") is None  # no GPUs, not in the table


def test_measured_gpu_memory_wins_over_catalog() -> None:
    book = load_pricebook()
    price = book.node_price("g5.xlarge", "on-demand", gpus=1, gpu_memory_mib=23028)
    assert price is not None and price.per_gib_hour == Decimal("1.006") * 1024 / 23028


def test_override_file_sets_spot_price_and_adds_types(tmp_path: Path) -> None:
    f = tmp_path / "prices.yaml"
    f.write_text(
        "instance_types:\n  g5.12xlarge: {spot: '2.10'}\n"
        "  a3-highgpu-8g: {on_demand: '88.25', gpus: 8, gpu_model: H100, gpu_memory_mib: 81920}\n"
    )
    book = load_pricebook(str(f))
    spot = book.node_price("g5.12xlarge", "spot")
    assert spot is not None and spot.per_hour == Decimal("2.10") and spot.source == "spot-file"
    gcp = book.node_price("a3-highgpu-8g", "on-demand")
    assert gcp is not None and gcp.per_gpu_hour == Decimal("88.25") / 8


def test_bad_override_names_the_entry(tmp_path: Path) -> None:
    f = tmp_path / "prices.json"
    f.write_text('{"instance_types": {"x1": {"on_demand": "abc", "gpus": 1}}}')
    with pytest.raises(ValueError, match="price entry 'x1'"):
        load_pricebook(str(f))


PREFERRED = [{"weight": 10, "preference": {"matchExpressions": []}}]


@pytest.mark.parametrize(
    ("spec", "prefers"),
    [
        ({}, False),
        (
            {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}},
            False,
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": PREFERRED}
                }
            },
            True,
        ),
        (
            {
                "affinity": {
                    "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": PREFERRED}
                }
            },
            True,
        ),
        (
            {
                "affinity": {
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": PREFERRED
                    }
                }
            },
            True,
        ),
        (
            {
                "affinity": {
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": PREFERRED}
                }
            },
            False,
        ),
        (
            {"topologySpreadConstraints": [{"whenUnsatisfiable": "ScheduleAnyway", "maxSkew": 1}]},
            True,
        ),
        (
            {"topologySpreadConstraints": [{"whenUnsatisfiable": "DoNotSchedule", "maxSkew": 1}]},
            False,
        ),
    ],
)
def test_a_pod_states_a_preference_only_with_soft_terms(spec: dict, prefers: bool) -> None:
    """Soft affinity and breakable spreading are preferences kube-scheduler scores; hard
    terms are its filters' (the filter may decide for such a pod). Read from the wire's
    bytes, as the edge reads a filter's Pod, and from a dict, as the watch converts one."""
    body = gpu_pod("p", gpus=1)
    body["spec"].update(spec)
    assert states_preferences(pod(body)) is prefers
    assert states_preferences(msgspec.json.decode(msgspec.json.encode(body), type=Pod)) is prefers
