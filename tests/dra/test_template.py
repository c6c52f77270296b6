"""ResourceClaimTemplate / DeviceClass builders: schema-valid, CEL that selects the right GPUs."""

from __future__ import annotations

import copy
import re

import kubernetes_validate
import pytest
from kubernetes_validate.utils import all_versions, major_minor

from extender.dra.cel import device_activation, evaluate
from extender.dra.template import claim_template, default_name, device_class

from . import nvidia

# Every bundled Kubernetes version that has resource.k8s.io/v1 (GA in 1.34).
V1_VERSIONS = sorted(
    {
        major_minor(v)
        for v in all_versions()
        if tuple(map(int, major_minor(v).split("."))) >= (1, 34)
    },
    key=lambda v: tuple(map(int, v.split("."))),
)


def _selectors(doc: dict) -> list[str]:
    request = doc["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    return [s["cel"]["expression"] for s in request["selectors"]]


def _all_true(expressions: list[str], device: dict) -> bool:
    activation = device_activation(nvidia.DRIVER, device)
    results = [evaluate(e, activation) for e in expressions]
    assert all(not r.error for r in results), results
    return all(r.matched for r in results)


def test_bundled_schemas_cover_v1() -> None:
    assert V1_VERSIONS, "kubernetes-validate has no resource.k8s.io/v1 schema"
    assert V1_VERSIONS[0] == "1.34"


@pytest.mark.parametrize("version", V1_VERSIONS)
def test_template_and_class_validate_against_resource_k8s_io_v1(version: str) -> None:
    docs = [
        claim_template("20Gi", count=2, model="H100|H200", namespace="ml"),
        claim_template("40Gi", class_name="mig.nvidia.com", name="mig-40"),
        device_class(),
        device_class("mig.nvidia.com"),
    ]
    for doc in docs:
        assert kubernetes_validate.validate(doc, version, strict=True) == version


def test_extended_resource_name_validates_on_1_37() -> None:
    doc = device_class(extended_resource_name="nvidia.com/gpu")
    assert doc["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert kubernetes_validate.validate(doc, "1.37", strict=True) == "1.37"


def test_schema_check_is_real() -> None:
    """The validator rejects what the apiserver would (so passing above means something)."""
    doc = claim_template("20Gi")
    broken = copy.deepcopy(doc)
    del broken["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.37", strict=True)
    typo = copy.deepcopy(doc)
    typo["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selector"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, "1.37", strict=True)


def test_template_shape() -> None:
    doc = claim_template("20Gi")
    assert doc["apiVersion"] == "resource.k8s.io/v1"
    assert doc["kind"] == "ResourceClaimTemplate"
    assert doc["metadata"] == {
        "name": "gpu-20gi",
        "annotations": {"headroom.dev/gpu-memory": "20Gi"},
    }
    assert doc["spec"]["metadata"]["annotations"] == {"headroom.dev/gpu-memory": "20Gi"}
    request = doc["spec"]["spec"]["devices"]["requests"][0]
    assert request["name"] == "gpu"
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert request["exactly"]["allocationMode"] == "ExactCount"
    assert request["exactly"]["count"] == 1
    assert _selectors(doc) == [
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('20Gi')) >= 0"
    ]


def test_memory_selector_selects_by_capacity() -> None:
    h100 = nvidia.h100_device(0, nvidia.H100_UUIDS[0])  # 81559Mi
    assert _all_true(_selectors(claim_template("20Gi")), h100)
    assert _all_true(_selectors(claim_template("81559Mi")), h100)
    assert not _all_true(_selectors(claim_template("81560Mi")), h100)
    assert not _all_true(_selectors(claim_template("80G", count=1)), nvidia.mig_3g())
    assert _all_true(_selectors(claim_template("40000Mi")), nvidia.mig_3g())


def test_model_selector_round_trips_regex_escapes() -> None:
    h100 = nvidia.h100_device(0, nvidia.H100_UUIDS[0])  # "NVIDIA H100 80GB HBM3"
    assert _all_true(_selectors(claim_template("20Gi", model="H100|H200")), h100)
    assert not _all_true(_selectors(claim_template("20Gi", model="A100")), h100)
    # Backslash classes and a quote survive the CEL string literal unchanged.
    assert _all_true(_selectors(claim_template("20Gi", model=r"H100\s\d+GB")), h100)
    assert not _all_true(_selectors(claim_template("20Gi", model=r"H100\s\d+TB")), h100)
    assert not _all_true(_selectors(claim_template("20Gi", model="it's")), h100)


def test_device_class_selects_only_its_type() -> None:
    gpu_expr = device_class()["spec"]["selectors"][0]["cel"]["expression"]
    assert gpu_expr == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    )
    h100 = nvidia.h100_device(0, nvidia.H100_UUIDS[0])
    assert _all_true([gpu_expr], h100)
    assert not _all_true([gpu_expr], nvidia.mig_1g())
    mig_expr = device_class("mig.nvidia.com")["spec"]["selectors"][0]["cel"]["expression"]
    assert _all_true([mig_expr], nvidia.mig_1g())


def test_default_names_are_dns_1123() -> None:
    assert default_name("20Gi") == "gpu-20gi"
    assert default_name("1.5Gi", 2) == "gpu-1-5gi-x2"
    assert claim_template("1.5Gi", count=2)["metadata"]["name"] == "gpu-1-5gi-x2"
    assert claim_template("500M", name="small")["metadata"]["name"] == "small"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"memory": "0"}, "--memory must be positive"),
        ({"memory": "-1Gi"}, "--memory must be positive"),
        ({"memory": "20 Gi"}, "not a Kubernetes quantity"),
        ({"memory": "20GiB"}, "not a Kubernetes quantity"),
        ({"memory": "lots"}, "not a Kubernetes quantity"),
        ({"memory": "1_000"}, "not a Kubernetes quantity"),
        ({"memory": "20Gi", "count": 0}, "--count must be an integer from 1 to 32"),
        ({"memory": "20Gi", "count": 33}, "--count must be an integer from 1 to 32"),
        ({"memory": "20Gi", "count": True}, "--count must be an integer"),
        ({"memory": "20Gi", "model": "("}, "--model is not a valid RE2 regex: missing )"),
        ({"memory": "20Gi", "model": "(?=H100)"}, "--model is not a valid RE2 regex"),
        ({"memory": "20Gi", "model": ""}, "--model must be a non-empty"),
        ({"memory": "20Gi", "name": "Bad_Name"}, "name 'Bad_Name' is not a DNS-1123"),
        ({"memory": "20Gi", "namespace": "ML"}, "namespace 'ML' is not a DNS-1123 label"),
        ({"memory": "20Gi", "class_name": "GPU"}, "device class 'GPU' is not a DNS-1123"),
    ],
)
def test_bad_input_is_a_clear_value_error(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        claim_template(**kwargs)


def test_unknown_device_class_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("unknown device class 'tpu.example.com'")):
        device_class("tpu.example.com")
