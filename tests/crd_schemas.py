"""Schemas of the custom resources headroom ships examples of, for strict validation.

``kubernetes-validate`` knows Kubernetes' own kinds only. Karpenter's ``NodeOverlay``
(``karpenter.sh/v1alpha1``) is checked here against the structure of its CRD
(kubernetes-sigs/karpenter ``pkg/apis/crds/karpenter.sh_nodeoverlays.yaml``: ``spec``
with ``requirements`` (required; key, operator In|NotIn|Exists|DoesNotExist|Gt|Lt,
values), ``capacity`` (extended resources only, quantities), ``price``,
``priceAdjustment`` and ``weight`` 1..10000), with unknown fields refused, as the API
server refuses them under strict field validation. The CRD's CEL rules that matter for
an example are checked by hand below.
"""

from __future__ import annotations

from typing import Any

import jsonschema

NODEOVERLAY_API = "karpenter.sh/v1alpha1"

_NUMBER = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
_QUANTITY = rf"^(\+|-)?{_NUMBER}(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?{_NUMBER}))?$"
_REQUIREMENT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["key", "operator"],
    "properties": {
        "key": {"type": "string", "maxLength": 316},
        "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]},
        "values": {"type": "array", "items": {"type": "string", "maxLength": 63}},
    },
}
NODEOVERLAY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": NODEOVERLAY_API},
        "kind": {"const": "NodeOverlay"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}},
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["requirements"],
            "properties": {
                "requirements": {"type": "array", "maxItems": 100, "items": _REQUIREMENT},
                "capacity": {
                    "type": "object",
                    "additionalProperties": {"type": "string", "pattern": _QUANTITY},
                },
                "price": {"type": "string", "pattern": r"^\d+(\.\d+)?$"},
                "priceAdjustment": {"type": "string"},
                "weight": {"type": "integer", "minimum": 1, "maximum": 10000},
            },
        },
    },
}
_STANDARD = {"cpu", "memory", "ephemeral-storage", "pods"}


def nodeoverlay_errors(doc: dict[str, Any]) -> list[str]:
    """What the API server would refuse in a NodeOverlay; empty when it is valid."""
    validator = jsonschema.Draft202012Validator(NODEOVERLAY_SCHEMA)
    out = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]
    spec = doc.get("spec") or {}
    if _STANDARD & set(spec.get("capacity") or {}):
        out.append("capacity: invalid resource restricted (cpu, memory, ... are not overlaid)")
    for r in spec.get("requirements") or []:
        n = len(r.get("values") or [])
        if r.get("operator") in ("In", "NotIn") and n == 0:
            out.append(f"requirements: operator {r['operator']} must have a value")
        if r.get("operator") in ("Gt", "Lt") and n != 1:
            out.append(f"requirements: operator {r['operator']} takes a single integer")
        key = str(r.get("key", ""))
        if key.split("/")[0].endswith("karpenter.sh") and key not in (
            "karpenter.sh/capacity-type",
            "karpenter.sh/nodepool",
        ):
            out.append(f'requirements: label domain "karpenter.sh" is restricted ({key})')
    if "price" in spec and "priceAdjustment" in spec:
        out.append("cannot set both 'price' and 'priceAdjustment'")
    return out
