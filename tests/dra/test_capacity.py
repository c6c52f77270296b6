"""Consumable capacity (KEP-5075): shared claims against shareable devices, as the
allocator counts them: requestPolicy rounding, what other claims consumed, the room left."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import kubernetes_validate
import pytest

from extender.dra.capacity import consumed_by, consumption, requested, room
from extender.dra.feasibility import DeviceKey, claim_fits
from extender.dra.kquantity import quantity_mib_ceil
from extender.dra.template import claim_template

from . import nvidia

GI = Decimal(2**30)
MI = Decimal(2**20)
NODE = nvidia.H100_NODE
GPU0 = DeviceKey("gpu.nvidia.com", NODE, "gpu-0")
GPU1 = DeviceKey("gpu.nvidia.com", NODE, "gpu-1")


def _shared(memory: str, **kwargs: Any) -> list[dict[str, Any]]:
    doc = claim_template(memory, shared=True, **kwargs)
    requests: list[dict[str, Any]] = doc["spec"]["spec"]["devices"]["requests"]
    return requests


def _device(policy: dict[str, Any] | None = None, value: str = "24Gi") -> dict[str, Any]:
    device: dict[str, Any] = nvidia.shareable_slice(value, policy)["spec"]["devices"][0]
    return device


def test_shareable_slice_is_a_valid_v1_slice() -> None:
    assert kubernetes_validate.validate(nvidia.shareable_slice(), "1.37", strict=True)


@pytest.mark.parametrize(
    ("policy", "asked", "consumed"),
    [
        ({"default": "1Mi", "validRange": {"min": "1Mi", "step": "1Mi"}}, "10Gi", 10 * GI),
        # rounded up to the next step above min: 1Gi + 4 x 3Gi
        ({"default": "1Gi", "validRange": {"min": "1Gi", "step": "3Gi"}}, "12Gi", 13 * GI),
        ({"default": "1Gi", "validRange": {"min": "4Gi"}}, "1Gi", 4 * GI),  # min wins
        ({"default": "6Gi", "validValues": ["6Gi", "12Gi", "24Gi"]}, "7Gi", 12 * GI),
        ({}, "5000Mi", 5000 * MI),  # no policy: as asked
    ],
)
def test_request_policy_rounds_up(policy: dict[str, Any], asked: str, consumed: Decimal) -> None:
    amounts = consumption(_device(policy), requested({"capacity": {"requests": {"memory": asked}}}))
    assert amounts == {"memory": consumed}


def test_request_policy_refuses_what_it_cannot_round_to() -> None:
    over_max = {"default": "1Gi", "validRange": {"min": "1Gi", "max": "16Gi"}}
    assert "outside the device's requestPolicy" in str(
        consumption(_device(over_max), {"memory": 20 * GI})
    )
    over_values = {"default": "6Gi", "validValues": ["6Gi", "12Gi"]}
    assert "outside" in str(consumption(_device(over_values), {"memory": 13 * GI}))
    assert consumption(_device(), {"cores": Decimal(1)}) == "has no capacity cores"


def test_unnamed_capacity_takes_the_default_or_the_whole_device() -> None:
    assert consumption(_device({"default": "2Gi", "validRange": {"min": "1Gi"}}), {}) == {
        "memory": 2 * GI
    }
    whole = _device()
    del whole["capacity"]["memory"]["requestPolicy"]
    assert consumption(whole, {}) == {"memory": 24 * GI}


def test_room_counts_what_others_consumed() -> None:
    device = _device()
    assert room(device, {"memory": 10 * GI}, {"memory": 14 * GI}) == {"memory": 10 * GI}
    assert room(device, {"memory": 20 * GI}, {"memory": 10 * GI}) == (
        "memory: 20Gi asked, 14Gi of 24Gi left"
    )


def test_consumed_by_sums_shares_per_device() -> None:
    results: list[dict[str, Any]] = [
        {"driver": "d", "pool": "p", "device": "gpu-0", "consumedCapacity": {"memory": "10Gi"}},
        {"driver": "d", "pool": "p", "device": "gpu-0", "consumedCapacity": {"d/memory": "4Gi"}},
        {"driver": "d", "pool": "p", "device": "gpu-1"},  # a whole device: no share
    ]
    assert consumed_by(results) == {("d", "p", "gpu-0"): {"memory": 14 * GI}}


def test_two_shares_fit_one_24gi_gpu_a_third_goes_to_the_next() -> None:
    """10 + 10 GiB on gpu-0, then 20 GiB does not fit its 4 GiB left: gpu-1, as
    kube-scheduler's first-fit allocator places them."""
    slices, classes = [nvidia.shareable_slice()], nvidia.CLASSES
    first = claim_fits(_shared("10Gi"), classes, slices, set())
    assert [(p.device, p.consumed) for p in first.devices] == [("gpu-0", {"memory": 10 * GI})]
    held = {GPU0: {"memory": 10 * GI}}
    second = claim_fits(_shared("10Gi"), classes, slices, {("gpu.nvidia.com", NODE, "gpu-0")}, held)
    assert [p.device for p in second.devices] == ["gpu-0"]  # allocated, yet shareable
    held = {GPU0: {"memory": 20 * GI}}
    third = claim_fits(_shared("20Gi"), classes, slices, {("gpu.nvidia.com", NODE, "gpu-0")}, held)
    assert [p.device for p in third.devices] == ["gpu-1"]


def test_no_room_anywhere_says_how_much_is_left() -> None:
    held = {GPU0: {"memory": 20 * GI}, GPU1: {"memory": 16 * GI}}
    fit = claim_fits(_shared("10Gi"), nvidia.CLASSES, [nvidia.shareable_slice()], set(), held)
    assert not fit.fits
    assert "gpu-0: memory: 10Gi asked, 4Gi of 24Gi left" in fit.reason
    assert "gpu-1: memory: 10Gi asked, 8Gi of 24Gi left" in fit.reason


def test_shared_claim_does_not_take_a_device_that_cannot_be_shared() -> None:
    fit = claim_fits(_shared("10Gi"), nvidia.CLASSES, [nvidia.h100_slice()], set())
    assert not fit.fits  # the template selects device.allowMultipleAllocations


def test_whole_device_claim_on_a_shareable_device_consumes_all_of_it() -> None:
    """A plain (not --shared) claim on a shareable device without a requestPolicy takes its
    whole capacity, so it fits only where nothing is consumed yet."""
    plain = nvidia.shareable_slice()
    for d in plain["spec"]["devices"]:
        del d["capacity"]["memory"]["requestPolicy"]
    whole = claim_template("20Gi")["spec"]["spec"]["devices"]["requests"]
    fit = claim_fits(whole, nvidia.CLASSES, [plain], set(), {GPU0: {"memory": MI}})
    assert [(p.device, p.consumed) for p in fit.devices] == [("gpu-1", {"memory": 24 * GI})]


def test_mib_ceil_rounds_a_fraction_up() -> None:
    # Decimal's // truncates toward zero: -(-x // MiB) would have said 1
    assert quantity_mib_ceil("1536Ki") == 2
    assert quantity_mib_ceil("20Gi") == 20480
