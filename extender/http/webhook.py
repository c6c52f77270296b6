"""Admission guardrail: refuse pods that see GPUs through NVIDIA_VISIBLE_DEVICES alone.

With the NVIDIA container runtime, a container whose environment says
``NVIDIA_VISIBLE_DEVICES=all`` (or device ids/UUIDs) gets those GPUs even though the
scheduler gave it none, so it runs on memory that was sold to someone else and is
never billed. This webhook (a ValidatingWebhookConfiguration on pods, CREATE and the
``ephemeralcontainers`` UPDATE) denies such a container unless it asks for a GPU:
``nvidia.com/gpu`` or ``nvidia.com/mig-*`` in its requests/limits, or a DRA claim
(``resources.claims`` naming one of the pod's ``spec.resourceClaims``).

Checked: containers, initContainers and ephemeralContainers (the latter cannot hold
resources, so any value there is refused). The effective entry is the last
``NVIDIA_VISIBLE_DEVICES`` in ``env`` (Kubernetes lets a later entry win). Allowed
values: unset, empty, ``void``, ``none``. A ``valueFrom`` entry is refused: its value
is only known on the node, so it cannot be checked here. Not checked: ``envFrom``
(ConfigMap/Secret contents are not in the request); the node agent's leak report is
the backstop for that and for images that bake the variable in.

``review_pod`` is pure (AdmissionReview dict in, AdmissionReview dict out);
``webhook_router`` is the HTTP edge. A malformed review is a 400 naming the problem.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

API_VERSION = "admission.k8s.io/v1"
VARIABLE = "NVIDIA_VISIBLE_DEVICES"
HARMLESS_VALUES = frozenset({"", "void", "none"})
GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


@dataclass(frozen=True)
class WebhookPolicy:
    mode: Literal["deny", "warn"] = "deny"
    exempt_namespaces: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.mode not in ("deny", "warn"):
            raise ValueError(f"webhook mode must be 'deny' or 'warn', not {self.mode!r}")


class BadReview(ValueError):
    """The body is not an AdmissionReview v1 for a pod; the message says what is wrong."""


def review_pod(review: Any, policy: WebhookPolicy) -> dict[str, Any]:
    """The AdmissionReview response for one pod review; BadReview when malformed."""
    request = _request(review)
    uid = request["uid"]
    pod = request.get("object")
    namespace = request.get("namespace") or _map(_map(pod).get("metadata")).get("namespace", "")
    if not isinstance(namespace, str):
        raise BadReview("request.namespace must be a string")
    if pod is None or namespace in policy.exempt_namespaces or not _is_pod(request):
        return _response(uid, allowed=True)
    problems = violations(_pod(pod))
    if not problems:
        return _response(uid, allowed=True)
    if policy.mode == "warn":
        return _response(uid, allowed=True, warnings=[f"headroom: {p}" for p in problems])
    return _response(uid, allowed=False, message="; ".join(problems))


def violations(pod: Mapping[str, Any]) -> list[str]:
    """One sentence per container that can see GPUs it did not ask for."""
    spec = _field(pod, "spec", Mapping, "")
    claims = {
        c["name"]
        for c in _field(spec, "resourceClaims", list, "spec", [])
        if isinstance(c, Mapping) and isinstance(c.get("name"), str)
    }
    out: list[str] = []
    for list_name in _CONTAINER_LISTS:
        for i, container in enumerate(_field(spec, list_name, list, "spec", [])):
            where = f"spec.{list_name}[{i}]"
            if not isinstance(container, Mapping):
                raise BadReview(f"request.object.{where} must be an object")
            problem = _container_problem(container, list_name, claims, where)
            if problem:
                out.append(problem)
    return out


def _container_problem(
    container: Mapping[str, Any], list_name: str, claims: set[str], where: str
) -> str | None:
    entry = _visible_devices(container, where)
    if entry is None:
        return None
    name = container.get("name", where)
    kind = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}
    label = f"{kind.get(list_name, 'container')} {name!r}"
    if "valueFrom" in entry:
        setting = f"sets {VARIABLE} from valueFrom (cannot be checked at admission)"
    else:
        value = entry.get("value", "")
        value = value if isinstance(value, str) else str(value)
        if value.strip().lower() in HARMLESS_VALUES:
            return None
        setting = f"sets {VARIABLE}={value}"
    if _asks_for_gpu(container, claims, where):
        return None
    return (
        f"{label} {setting} but requests no GPU; remove the variable or request "
        f"{GPU_RESOURCE} / a ResourceClaim"
    )


def _visible_devices(container: Mapping[str, Any], where: str) -> Mapping[str, Any] | None:
    """The effective (last) NVIDIA_VISIBLE_DEVICES env entry, or None."""
    found = None
    for j, entry in enumerate(_field(container, "env", list, where, [])):
        if not isinstance(entry, Mapping):
            raise BadReview(f"request.object.{where}.env[{j}] must be an object")
        if entry.get("name") == VARIABLE:
            found = entry
    return found


def _asks_for_gpu(container: Mapping[str, Any], claims: set[str], where: str) -> bool:
    resources = _field(container, "resources", Mapping, where, {})
    for section in ("limits", "requests"):
        for name, amount in _field(resources, section, Mapping, f"{where}.resources", {}).items():
            if (name == GPU_RESOURCE or str(name).startswith(MIG_PREFIX)) and _positive(amount):
                return True
    used = _field(resources, "claims", list, f"{where}.resources", [])
    return any(
        isinstance(c, Mapping) and isinstance(c.get("name"), str) and c["name"] in claims
        for c in used
    )


def _positive(amount: Any) -> bool:
    try:
        return float(str(amount)) > 0
    except ValueError:
        return True  # not a plain count: the apiserver validates it; do not second-guess


def _request(review: Any) -> Mapping[str, Any]:
    if not isinstance(review, Mapping):
        raise BadReview("body must be a JSON object (an AdmissionReview)")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise BadReview(
            f"expected apiVersion {API_VERSION} kind AdmissionReview, got "
            f"{review.get('apiVersion')!r} {review.get('kind')!r}"
        )
    request = review.get("request")
    if not isinstance(request, Mapping):
        raise BadReview("AdmissionReview has no request object")
    if not isinstance(request.get("uid"), str) or not request["uid"]:
        raise BadReview("request.uid must be a non-empty string")
    return request


def _is_pod(request: Mapping[str, Any]) -> bool:
    kind = _map(request.get("kind"))
    return kind.get("kind", "Pod") == "Pod" and kind.get("group", "") == ""


def _pod(pod: Any) -> Mapping[str, Any]:
    if not isinstance(pod, Mapping):
        raise BadReview("request.object must be a Pod object")
    return pod


def _field(obj: Mapping[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    value = obj.get(key)
    if value is None and default is not None:
        return default
    if not isinstance(value, kind):
        expected = "a list" if kind is list else "an object"
        path = ".".join(p for p in ("request.object", where, key) if p)
        raise BadReview(f"{path} must be {expected}")
    return value


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _response(
    uid: str, allowed: bool, message: str = "", warnings: list[str] | None = None
) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": message}
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def webhook_router(policy: WebhookPolicy) -> APIRouter:
    """``POST /admit/pods``: AdmissionReview in, AdmissionReview out; 400 when malformed."""
    router = APIRouter()

    @router.post("/admit/pods")
    async def admit_pods(request: Request) -> JSONResponse:
        body = await request.body()
        try:
            review = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            return JSONResponse({"error": f"body is not JSON: {e}"}, status_code=400)
        try:
            return JSONResponse(review_pod(review, policy))
        except BadReview as e:
            return JSONResponse({"error": str(e)}, status_code=400)

    return router
