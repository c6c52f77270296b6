"""The NVIDIA_VISIBLE_DEVICES admission guardrail, over real HTTP (uvicorn on loopback)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.http.webhook import BadReview, WebhookPolicy, review_pod, webhook_router
from extender.simulate.server_thread import ServerThread

UID = "705ab4f5-6393-11e8-b7cc-42010a800002"


def _container(
    name: str = "main",
    env: list[dict[str, Any]] | None = None,
    resources: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A container as admission sees it: after defaulting."""
    c: dict[str, Any] = {
        "name": name,
        "image": "nvcr.io/nvidia/pytorch:24.07-py3",
        "command": ["python", "train.py"],
        "resources": resources or {},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    if env is not None:
        c["env"] = env
    return c


def _pod(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": "trainer-",
            "namespace": "ml",
            "labels": {"batch.kubernetes.io/job-name": "trainer"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "trainer",
                    "uid": "b1c2",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": containers,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            **spec,
        },
        "status": {},
    }


def _review(
    pod: dict[str, Any] | None,
    operation: str = "CREATE",
    namespace: str = "ml",
    sub_resource: str | None = None,
) -> dict[str, Any]:
    """An AdmissionReview as kube-apiserver posts it to a ValidatingWebhookConfiguration."""
    request: dict[str, Any] = {
        "uid": UID,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace,
        "operation": operation,
        "userInfo": {
            "username": "system:serviceaccount:kube-system:job-controller",
            "uid": "3f5a",
            "groups": [
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
                "system:authenticated",
            ],
        },
        "object": pod,
        "oldObject": None,
        "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}


def _env(value: str) -> list[dict[str, Any]]:
    return [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": value},
    ]


GPU = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
DENY = WebhookPolicy()


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    app = FastAPI()
    app.include_router(webhook_router(WebhookPolicy(exempt_namespaces=frozenset({"gpu-operator"}))))
    warn = FastAPI()
    warn.include_router(webhook_router(WebhookPolicy(mode="warn")))
    app.mount("/warn", warn)
    with ServerThread(app) as base:
        yield base


def _post(url: str, body: Any, path: str = "/admit/pods") -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        url + path, content=content, headers={"Content-Type": "application/json"}, timeout=10
    )


def _response(url: str, review: dict[str, Any], path: str = "/admit/pods") -> dict[str, Any]:
    r = _post(url, review, path)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["apiVersion"], body["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert body["response"]["uid"] == UID
    out: dict[str, Any] = body["response"]
    return out


def test_denies_all_without_a_gpu_request(url: str) -> None:
    resp = _response(url, _review(_pod([_container(env=_env("all"))])))
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 403
    assert resp["status"]["message"] == (
        "container 'main' sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU; "
        "remove the variable or request nvidia.com/gpu / a ResourceClaim"
    )


@pytest.mark.parametrize(
    "value",
    [
        "0",
        "0,1",
        "GPU-4b0c3b1f-7e2a-5d1e-9c3f-1a2b3c4d5e6f",
        "MIG-5c1a9e7e-2f43-5a5c-9b1e-0d6f1c2e3a4b",
        "ALL",
    ],
)
def test_denies_device_ids_and_uuids(url: str, value: str) -> None:
    resp = _response(url, _review(_pod([_container(env=_env(value))])))
    assert resp["allowed"] is False
    assert f"NVIDIA_VISIBLE_DEVICES={value} but requests no GPU" in resp["status"]["message"]


@pytest.mark.parametrize("value", ["", "void", "none", "NONE"])
def test_allows_values_that_hide_gpus(url: str, value: str) -> None:
    resp = _response(url, _review(_pod([_container(env=_env(value))])))
    assert resp == {"uid": UID, "allowed": True}


@pytest.mark.parametrize(
    "resources",
    [
        GPU,
        {"limits": {"nvidia.com/gpu": "2"}},
        {"limits": {"nvidia.com/mig-1g.10gb": "1"}, "requests": {"nvidia.com/mig-1g.10gb": "1"}},
    ],
)
def test_allows_containers_that_request_gpus(url: str, resources: dict[str, Any]) -> None:
    resp = _response(url, _review(_pod([_container(env=_env("all"), resources=resources)])))
    assert resp["allowed"] is True


def test_zero_gpus_is_no_gpu(url: str) -> None:
    resources = {"limits": {"nvidia.com/gpu": "0"}}
    resp = _response(url, _review(_pod([_container(env=_env("all"), resources=resources)])))
    assert resp["allowed"] is False


def test_allows_a_dra_claim(url: str) -> None:
    container = _container(env=_env("all"), resources={"claims": [{"name": "gpu"}]})
    pod = _pod(
        [container], resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "gpu-20gi"}]
    )
    assert _response(url, _review(pod))["allowed"] is True
    # A claim the pod does not declare does not count.
    pod["spec"]["resourceClaims"] = []
    assert _response(url, _review(pod))["allowed"] is False


def test_a_gpu_in_one_container_does_not_cover_another(url: str) -> None:
    pod = _pod([_container("train", resources=GPU), _container("sidecar", env=_env("all"))])
    resp = _response(url, _review(pod))
    assert resp["allowed"] is False
    assert resp["status"]["message"].startswith("container 'sidecar' sets")


def test_init_and_ephemeral_containers_are_checked(url: str) -> None:
    pod = _pod([_container(resources=GPU)], initContainers=[_container("warmup", env=_env("all"))])
    resp = _response(url, _review(pod))
    assert resp["status"]["message"].startswith("init container 'warmup' sets")
    debug = {
        "name": "debugger-x7k2",
        "image": "busybox",
        "env": _env("all"),
        "targetContainerName": "main",
    }
    pod = _pod([_container(resources=GPU)], ephemeralContainers=[debug])
    resp = _response(url, _review(pod, operation="UPDATE", sub_resource="ephemeralcontainers"))
    assert resp["allowed"] is False
    assert resp["status"]["message"].startswith("ephemeral container 'debugger-x7k2' sets")


def test_two_violations_are_both_named(url: str) -> None:
    pod = _pod([_container("a", env=_env("all")), _container("b", env=_env("1"))])
    message = _response(url, _review(pod))["status"]["message"]
    assert "container 'a' sets NVIDIA_VISIBLE_DEVICES=all" in message
    assert "; container 'b' sets NVIDIA_VISIBLE_DEVICES=1" in message


def test_value_from_is_denied_as_uncheckable(url: str) -> None:
    env = [
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"configMapKeyRef": {"name": "gpu-env", "key": "devices"}},
        }
    ]
    resp = _response(url, _review(_pod([_container(env=env)])))
    assert resp["allowed"] is False
    assert "from valueFrom (cannot be checked at admission)" in resp["status"]["message"]
    with_gpu = _pod([_container(env=env, resources=GPU)])
    assert _response(url, _review(with_gpu))["allowed"] is True


def test_the_last_entry_wins(url: str) -> None:
    hidden = [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
    ]
    assert _response(url, _review(_pod([_container(env=hidden)])))["allowed"] is True
    shown = list(reversed(hidden))
    assert _response(url, _review(_pod([_container(env=shown)])))["allowed"] is False


def test_pods_without_the_variable_pass(url: str) -> None:
    assert _response(url, _review(_pod([_container()])))["allowed"] is True
    assert _response(url, _review(_pod([_container(resources=GPU)])))["allowed"] is True


def test_exempt_namespace(url: str) -> None:
    pod = _pod([_container(env=_env("all"))])
    pod["metadata"]["namespace"] = "gpu-operator"
    assert _response(url, _review(pod, namespace="gpu-operator"))["allowed"] is True


def test_delete_has_no_object(url: str) -> None:
    assert _response(url, _review(None, operation="DELETE"))["allowed"] is True


def test_warn_mode_allows_with_warnings(url: str) -> None:
    resp = _response(url, _review(_pod([_container(env=_env("all"))])), "/warn/admit/pods")
    assert resp["allowed"] is True
    assert "status" not in resp
    assert resp["warnings"] == [
        "headroom: container 'main' sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU; "
        "remove the variable or request nvidia.com/gpu / a ResourceClaim"
    ]


def _broken(mutate: Any) -> dict[str, Any]:
    review = _review(_pod([_container(env=_env("all"))]))
    mutate(review)
    return review


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"{not json", "body is not JSON"),
        (b"\xff\xfe", "body is not JSON"),
        ([], "body must be a JSON object"),
        (
            _broken(lambda r: r.update(apiVersion="admission.k8s.io/v1beta1")),
            "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got "
            "'admission.k8s.io/v1beta1' 'AdmissionReview'",
        ),
        (_broken(lambda r: r.pop("request")), "AdmissionReview has no request object"),
        (_broken(lambda r: r["request"].pop("uid")), "request.uid must be a non-empty string"),
        (_broken(lambda r: r["request"].update(object=[])), "request.object must be a Pod object"),
        (
            _broken(lambda r: r["request"]["object"].pop("spec")),
            "request.object.spec must be an object",
        ),
        (
            _broken(lambda r: r["request"]["object"]["spec"].update(containers={})),
            "request.object.spec.containers must be a list",
        ),
        (
            _broken(lambda r: r["request"]["object"]["spec"]["containers"][0].update(env="x")),
            "request.object.spec.containers[0].env must be a list",
        ),
        (
            _broken(lambda r: r["request"]["object"]["spec"]["containers"][0]["env"].append(7)),
            "request.object.spec.containers[0].env[2] must be an object",
        ),
        (
            _broken(lambda r: r["request"]["object"]["spec"]["containers"][0].update(resources=[])),
            "request.object.spec.containers[0].resources must be an object",
        ),
    ],
)
def test_malformed_reviews_are_400_naming_the_problem(url: str, body: Any, error: str) -> None:
    r = _post(url, body)
    assert r.status_code == 400, r.text
    assert r.json() == {"error": error} or r.json()["error"].startswith(error)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_PATHS = [
    ("request",),
    ("request", "object"),
    ("request", "object", "spec"),
    ("request", "object", "spec", "containers"),
    ("request", "object", "spec", "containers", 0),
    ("request", "object", "spec", "containers", 0, "env"),
    ("request", "object", "spec", "containers", 0, "env", 1),
    ("request", "object", "spec", "containers", 0, "resources"),
    ("request", "object", "spec", "containers", 0, "name"),
    ("request", "object", "spec", "containers", 0, "resources", "limits"),
    ("request", "object", "spec", "containers", 0, "resources", "claims"),
    ("request", "object", "spec", "resourceClaims"),
    ("request", "kind"),
    ("request", "namespace"),
    ("request", "object", "metadata"),
    ("request", "uid"),
]


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(_PATHS), junk=_json)
def test_any_junk_is_a_review_or_bad_review(path: tuple[Any, ...], junk: Any) -> None:
    """Pure core: whatever the body, the answer is a response or BadReview, never a crash."""
    container = _container(env=_env("all"), resources={"claims": [{"name": "gpu"}]})
    review = copy.deepcopy(_review(_pod([container], resourceClaims=[{"name": "gpu"}])))
    target: Any = review
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = junk
    try:
        out = review_pod(review, DENY)
    except BadReview as e:
        assert str(e)
        return
    assert out["response"]["uid"] == review["request"]["uid"]
    assert isinstance(out["response"]["allowed"], bool)


def test_policy_mode_is_checked() -> None:
    with pytest.raises(ValueError, match="webhook mode must be 'deny' or 'warn'"):
        WebhookPolicy(mode="audit")  # type: ignore[arg-type]
