"""ResourceClaimTemplate and DeviceClass documents for GPUs (``headroom claim``).

A template asks DRA for ``count`` devices of a class whose memory capacity is at
least ``memory`` (and, optionally, whose ``productName`` matches a regex). The CEL
is written the way Kubernetes evaluates it: capacities are Quantities, compared with
``compareTo(quantity(...))``. The memory is also written as the annotation
``headroom.dev/gpu-memory`` on the template and on the claims made from it, so the
extender reads the need without parsing CEL.

No consumable-capacity request (``capacity.requests.memory``) is written: the NVIDIA
driver does not publish ``allowMultipleAllocations`` devices (docs/protocol.md §2.5), so a
claim gets a whole device (or MIG instance) that has at least this much memory.
"""

from __future__ import annotations

import re
from typing import Any

import re2

from extender.core.quantity import parse_quantity
from extender.dra.celfuncs import compile_re2, re2_message
from extender.wire.annotations import ANN_MEMORY

API_VERSION = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
REQUEST_NAME = "gpu"
MAX_COUNT = 32
# DeviceClasses of the NVIDIA chart (deviceclass-*.yaml) -> the device ``type`` they select.
NVIDIA_CLASSES = {"gpu.nvidia.com": "gpu", "mig.nvidia.com": "mig", "vfio.gpu.nvidia.com": "vfio"}

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def claim_template(
    memory: str,
    count: int = 1,
    model: str | None = None,
    name: str | None = None,
    class_name: str = DRIVER,
    namespace: str | None = None,
) -> dict[str, Any]:
    """A ``resource.k8s.io/v1`` ResourceClaimTemplate; ValueError says which input is bad."""
    _check_memory(memory)
    _check_count(count)
    if model is not None:
        _check_model(model)
    _check_subdomain("device class", class_name)
    name = name if name is not None else default_name(memory, count)
    _check_subdomain("name", name)
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        _check_label("namespace", namespace)
        metadata["namespace"] = namespace
    metadata["annotations"] = {ANN_MEMORY: memory}
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": metadata,
        "spec": {
            "metadata": {"annotations": {ANN_MEMORY: memory}},
            "spec": {"devices": {"requests": [_request(memory, count, model, class_name)]}},
        },
    }


def _request(memory: str, count: int, model: str | None, class_name: str) -> dict[str, Any]:
    # Attributes are under gpu.nvidia.com whatever the class is called: a site's own
    # class (say "h100") still selects devices the NVIDIA driver published.
    selectors = [{"cel": {"expression": memory_selector(memory)}}]
    if model is not None:
        selectors.append({"cel": {"expression": model_selector(model)}})
    return {
        "name": REQUEST_NAME,
        "exactly": {
            "deviceClassName": class_name,
            "allocationMode": "ExactCount",
            "count": count,
            "selectors": selectors,
        },
    }


def memory_selector(memory: str, driver: str = DRIVER) -> str:
    return f"device.capacity['{driver}'].memory.compareTo(quantity('{memory}')) >= 0"


def model_selector(model: str, driver: str = DRIVER) -> str:
    return f"device.attributes['{driver}'].productName.matches('{cel_string(model)}')"


def cel_string(text: str) -> str:
    """Escape text for a single-quoted CEL string literal (backslash and quote)."""
    return text.replace("\\", "\\\\").replace("'", "\\'")


def default_name(memory: str, count: int = 1) -> str:
    """``20Gi`` -> ``gpu-20gi``; ``1.5Gi`` x 2 -> ``gpu-1-5gi-x2`` (a DNS-1123 name)."""
    slug = re.sub(r"[^a-z0-9]+", "-", memory.lower()).strip("-")
    return f"gpu-{slug}" + (f"-x{count}" if count > 1 else "")


def device_class(name: str = DRIVER, extended_resource_name: str | None = None) -> dict[str, Any]:
    """The DeviceClass NVIDIA's chart installs for ``name`` (gpu / mig / vfio devices).

    ``extended_resource_name`` (e.g. ``nvidia.com/gpu``, as the chart sets on v1) lets
    DRA serve classic ``nvidia.com/gpu`` requests; it is off by default because on a
    cluster that also runs the device plugin it changes how those pods are served.
    """
    device_type = NVIDIA_CLASSES.get(name)
    if device_type is None:
        known = ", ".join(sorted(NVIDIA_CLASSES))
        raise ValueError(f"unknown device class {name!r}: headroom writes only {known}")
    expression = (
        f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{device_type}'"
    )
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def _check_memory(memory: str) -> None:
    try:
        value = parse_quantity(memory)
    except ValueError as e:
        raise ValueError(f"--memory: {e}") from None
    if value <= 0:
        raise ValueError(f"--memory must be positive, got {memory!r}")


def _check_count(count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise ValueError(f"--count must be an integer from 1 to {MAX_COUNT}, got {count!r}")


def _check_model(model: str) -> None:
    if not model:
        raise ValueError("--model must be a non-empty regular expression")
    try:
        compile_re2(model)  # RE2, the engine CEL matches() uses; Python-only syntax is refused
    except re2.error as e:
        raise ValueError(f"--model is not a valid RE2 regex: {re2_message(e)}") from None


def _check_subdomain(what: str, value: str) -> None:
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ValueError(f"{what} {value!r} is not a DNS-1123 subdomain (a-z, 0-9, '-', '.')")


def _check_label(what: str, value: str) -> None:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(f"{what} {value!r} is not a DNS-1123 label (lowercase a-z, 0-9, '-')")
