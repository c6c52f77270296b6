"""ResourceClaimTemplate and DeviceClass documents for GPUs (``headroom claim``).

A template asks DRA for ``count`` devices of a class whose memory capacity is at
least ``memory`` (and, optionally, whose ``productName`` matches a regex). The CEL
is written the way Kubernetes evaluates it: capacities are Quantities, compared with
``compareTo(quantity(...))``. The memory is also written as the annotation
``headroom.dev/gpu-memory`` on the template and on the claims made from it, so the
extender reads the need without parsing CEL.

By default a claim gets a whole device (or MIG instance) that has at least this much
memory. With ``shared=True`` it asks for ``memory`` *of* one device instead: DRA consumable
capacity (KEP-5075, beta and on by default since 1.36), ``exactly.capacity.requests.memory``,
on a device that allows multiple allocations (the NVIDIA driver publishes such devices
behind ``--consumable-shares=memory``). kube-scheduler then allocates a share and records
what it consumed (``consumedCapacity``, rounded up by the device's ``requestPolicy``) and a
``shareID`` in the claim's status. Nothing at run time caps a share's memory: the
extender's measured headroom is the only guard (docs/dra.md).
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
SHAREABLE_SELECTOR = "device.allowMultipleAllocations"
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
    shared: bool = False,
) -> dict[str, Any]:
    """A ``resource.k8s.io/v1`` ResourceClaimTemplate; ValueError says which input is bad.

    ``shared``: ``memory`` of one shareable device (consumable capacity), not a whole
    device with at least that much."""
    _check_memory(memory)
    _check_count(count)
    if shared and count != 1:
        raise ValueError(f"--shared asks for memory of one device: --count must be 1, got {count}")
    if model is not None:
        _check_model(model)
    _check_subdomain("device class", class_name)
    name = name if name is not None else default_name(memory, count, shared)
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
            "spec": {"devices": {"requests": [_request(memory, count, model, class_name, shared)]}},
        },
    }


def _request(
    memory: str, count: int, model: str | None, class_name: str, shared: bool
) -> dict[str, Any]:
    # Attributes are under gpu.nvidia.com whatever the class is called: a site's own
    # class (say "h100") still selects devices the NVIDIA driver published.
    # A shared request selects only shareable devices: on a device that does not allow
    # multiple allocations a capacity request is a mere filter and takes the whole device.
    first = SHAREABLE_SELECTOR if shared else memory_selector(memory)
    selectors = [{"cel": {"expression": first}}]
    if model is not None:
        selectors.append({"cel": {"expression": model_selector(model)}})
    exactly: dict[str, Any] = {
        "deviceClassName": class_name,
        "allocationMode": "ExactCount",
        "count": count,
        "selectors": selectors,
    }
    if shared:
        exactly["capacity"] = {"requests": {"memory": memory}}
    return {"name": REQUEST_NAME, "exactly": exactly}


def memory_selector(memory: str, driver: str = DRIVER) -> str:
    return f"device.capacity['{driver}'].memory.compareTo(quantity('{memory}')) >= 0"


def model_selector(model: str, driver: str = DRIVER) -> str:
    return f"device.attributes['{driver}'].productName.matches('{cel_string(model)}')"


def cel_string(text: str) -> str:
    """Escape text for a single-quoted CEL string literal (backslash and quote)."""
    return text.replace("\\", "\\\\").replace("'", "\\'")


def default_name(memory: str, count: int = 1, shared: bool = False) -> str:
    """``20Gi`` -> ``gpu-20gi``; ``1.5Gi`` x 2 -> ``gpu-1-5gi-x2``; shared ``20Gi`` ->
    ``gpu-20gi-shared`` (a DNS-1123 name)."""
    slug = re.sub(r"[^a-z0-9]+", "-", memory.lower()).strip("-")
    return f"gpu-{slug}" + (f"-x{count}" if count > 1 else "") + ("-shared" if shared else "")


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
