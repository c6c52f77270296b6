"""claim_fits on one node's NVIDIA ResourceSlices: counts, modes, subrequests, taints."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

from extender.dra.feasibility import (
    Picked,
    claim_fits,
    current_slices,
    device_memory_mib,
    device_uuid,
)
from extender.dra.template import claim_template

from . import nvidia

NODE = nvidia.H100_NODE
GPU0 = ("gpu.nvidia.com", NODE, "gpu-0")
GPU1 = ("gpu.nvidia.com", NODE, "gpu-1")


def _requests(memory: str = "20Gi", **kwargs: Any) -> list[dict[str, Any]]:
    doc: list[dict[str, Any]] = claim_template(memory, **kwargs)["spec"]["spec"]["devices"][
        "requests"
    ]
    return doc


def _exactly(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com"}
    return {**base, **fields}


def test_first_free_device_is_taken() -> None:
    fit = claim_fits(_requests(), nvidia.CLASSES, [nvidia.h100_slice()], set())
    assert fit.fits and fit.reason == ""
    assert fit.devices == [Picked("gpu", *GPU0)]
    fit = claim_fits(_requests(), nvidia.CLASSES, [nvidia.h100_slice()], {GPU0})
    assert fit.devices == [Picked("gpu", *GPU1)]


def test_no_free_device_says_how_many_match() -> None:
    fit = claim_fits(_requests(), nvidia.CLASSES, [nvidia.h100_slice()], {GPU0, GPU1})
    assert not fit.fits and fit.devices == []
    assert fit.reason == (
        "request 'gpu': needs 1 device(s) of class 'gpu.nvidia.com'; "
        "0 of 0 free device(s) match (2 allocated)"
    )


def test_count_and_memory_and_model() -> None:
    slices = [nvidia.h100_slice()]
    assert [
        p.device for p in claim_fits(_requests(count=2), nvidia.CLASSES, slices, set()).devices
    ] == ["gpu-0", "gpu-1"]
    assert not claim_fits(_requests(count=3), nvidia.CLASSES, slices, set()).fits
    too_big = claim_fits(_requests("96Gi"), nvidia.CLASSES, slices, set())
    assert not too_big.fits and "0 of 2 free device(s) match (0 allocated)" in too_big.reason
    assert not claim_fits(_requests(model="A100"), nvidia.CLASSES, slices, set()).fits
    assert claim_fits(_requests(model="H100|H200"), nvidia.CLASSES, slices, set()).fits


def test_device_class_selector_applies() -> None:
    """A 20Gi request of class gpu.nvidia.com never gets a MIG device, mig.nvidia.com does."""
    slices = [nvidia.a100_mig_slice()]
    assert not claim_fits(_requests(), nvidia.CLASSES, slices, set()).fits
    fit = claim_fits(_requests(class_name="mig.nvidia.com"), nvidia.CLASSES, slices, set())
    assert fit.devices == [
        Picked("gpu", "gpu.nvidia.com", nvidia.A100_NODE, "gpu-0-mig-3g40gb-9-0")
    ]
    small = claim_fits(
        _requests("8Gi", class_name="mig.nvidia.com"),
        nvidia.CLASSES,
        slices,
        {("gpu.nvidia.com", nvidia.A100_NODE, "gpu-0-mig-3g40gb-9-0")},
    )
    assert [p.device for p in small.devices] == ["gpu-0-mig-1g10gb-19-6"]


def test_missing_device_class() -> None:
    fit = claim_fits(
        _requests(class_name="h100.example.com"), nvidia.CLASSES, [nvidia.h100_slice()], set()
    )
    assert not fit.fits
    assert fit.reason == "request 'gpu': DeviceClass 'h100.example.com' not found"


def test_all_mode_needs_every_matching_device_free() -> None:
    request = [{"name": "all", "exactly": _exactly(allocationMode="All")}]
    slices = [nvidia.h100_slice()]
    fit = claim_fits(request, nvidia.CLASSES, slices, set())
    assert fit.devices == [Picked("all", *GPU0), Picked("all", *GPU1)]
    busy = claim_fits(request, nvidia.CLASSES, slices, {GPU1})
    assert not busy.fits
    assert busy.reason == "request 'all': asks for all 2 matching devices, 1 already allocated"
    none = claim_fits(request, nvidia.CLASSES, [nvidia.a100_mig_slice()], set())
    assert not none.fits and "no device of class 'gpu.nvidia.com' matches" in none.reason


def test_first_available_takes_the_first_subrequest_that_fits() -> None:
    request = [
        {
            "name": "gpu",
            "firstAvailable": [
                {
                    "name": "h200",
                    **_exactly(
                        selectors=[
                            {
                                "cel": {
                                    "expression": "device.attributes['gpu.nvidia.com'].productName.matches('H200')"  # noqa: E501 - a CEL expression kept whole
                                }
                            }
                        ]
                    ),
                },
                {"name": "h100-pair", **_exactly(count=2)},
                {"name": "any", **_exactly()},
            ],
        }
    ]
    fit = claim_fits(request, nvidia.CLASSES, [nvidia.h100_slice()], set())
    assert fit.devices == [Picked("gpu/h100-pair", *GPU0), Picked("gpu/h100-pair", *GPU1)]
    fit = claim_fits(request, nvidia.CLASSES, [nvidia.h100_slice()], {GPU0})
    assert fit.devices == [Picked("gpu/any", *GPU1)]
    none = claim_fits(request, nvidia.CLASSES, [nvidia.h100_slice()], {GPU0, GPU1})
    assert not none.fits
    assert none.reason.count(" | ") == 2 and "'gpu/h200'" in none.reason


def test_two_requests_do_not_share_a_device() -> None:
    requests = [{"name": "a", "exactly": _exactly()}, {"name": "b", "exactly": _exactly()}]
    fit = claim_fits(requests, nvidia.CLASSES, [nvidia.h100_slice()], set())
    assert fit.devices == [Picked("a", *GPU0), Picked("b", *GPU1)]
    fit = claim_fits(requests, nvidia.CLASSES, [nvidia.h100_slice()], {GPU1})
    assert not fit.fits and fit.reason.startswith("request 'b': ")


def _tainted(effect: str, device: int = 0) -> dict[str, Any]:
    s = nvidia.h100_slice()
    s["spec"]["devices"][device]["taints"] = [
        {"key": "gpu.nvidia.com/xid", "value": "79", "effect": effect}
    ]
    kubernetes_validate.validate(s, "1.37", strict=True)
    return s


def test_blocking_taints_skip_the_device() -> None:
    for effect in ("NoSchedule", "NoExecute"):
        fit = claim_fits(_requests(), nvidia.CLASSES, [_tainted(effect)], set())
        assert fit.devices == [Picked("gpu", *GPU1)], effect
    fit = claim_fits(_requests(), nvidia.CLASSES, [_tainted("NoSchedule")], {GPU1})
    assert not fit.fits


def test_tolerated_taint_is_usable() -> None:
    for toleration in (
        {"key": "gpu.nvidia.com/xid", "operator": "Exists"},
        {"key": "gpu.nvidia.com/xid", "operator": "Equal", "value": "79", "effect": "NoSchedule"},
        {"operator": "Exists"},
    ):
        request = [{"name": "gpu", "exactly": _exactly(tolerations=[toleration])}]
        fit = claim_fits(request, nvidia.CLASSES, [_tainted("NoSchedule")], set())
        assert fit.devices == [Picked("gpu", *GPU0)], toleration
    wrong = [
        {
            "name": "gpu",
            "exactly": _exactly(
                tolerations=[{"key": "gpu.nvidia.com/xid", "operator": "Equal", "value": "48"}]
            ),
        }
    ]
    assert claim_fits(wrong, nvidia.CLASSES, [_tainted("NoSchedule")], set()).devices == [
        Picked("gpu", *GPU1)
    ]


def test_only_the_newest_pool_generation_counts() -> None:
    old = nvidia.h100_slice(generation=1)
    new = nvidia.h100_slice(generation=2)
    new["spec"]["devices"] = new["spec"]["devices"][1:]  # gpu-0 gone (e.g. fell off the bus)
    assert current_slices([old, new]) == [new]
    fit = claim_fits(_requests(count=2), nvidia.CLASSES, [old, new], set())
    assert not fit.fits
    assert fit.reason.endswith("1 of 1 free device(s) match (0 allocated)")


def test_selector_errors_are_reported_not_raised() -> None:
    request = [
        {
            "name": "gpu",
            "exactly": _exactly(
                selectors=[
                    {"cel": {"expression": "device.attributes['gpu.nvidia.com'].index == 0"}}
                ]
            ),
        }
    ]
    fit = claim_fits(request, nvidia.CLASSES, [nvidia.h100_slice()], set())
    assert not fit.fits
    assert "selector errors: gpu-0:" in fit.reason and "'index'" in fit.reason


def test_device_memory_and_uuid() -> None:
    gpu = nvidia.h100_device(0, nvidia.H100_UUIDS[0])
    assert device_memory_mib(gpu) == 81559
    assert device_uuid(gpu) == nvidia.H100_UUIDS[0]
    assert device_memory_mib(nvidia.mig_1g()) == 9728
    assert device_uuid(nvidia.mig_1g()) == nvidia.MIG_1G_UUID
    qualified = {
        "name": "gpu-0",
        "attributes": {"gpu.nvidia.com/uuid": {"string": "GPU-q"}},
        "capacity": {"gpu.nvidia.com/memory": {"value": "24Gi"}},
    }
    assert (device_uuid(qualified), device_memory_mib(qualified)) == ("GPU-q", 24576)
    assert device_memory_mib({"name": "nic-0"}) is None and device_uuid({"name": "x"}) is None
