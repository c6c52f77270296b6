"""Malformed requests get a 4xx (or the protocol's Error) naming the problem; the server
keeps serving and nothing changes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from extender.wire.report import SCHEMA_V1
from tests.support import TOKEN, Extender, gpu_pod, running_extender


@pytest.fixture
def ext(tmp_path: Path) -> Iterator[Extender]:
    with running_extender(tmp_path) as e:
        e.add_node("n1", "2xA10G:24Gi")
        yield e


def still_serving(ext: Extender) -> None:
    body = ext.post("filter", ext.schedule_args(gpu_pod("ok", memory="1Gi"), ["n1"])).json()
    assert body["NodeNames"] == ["n1"]


@pytest.mark.parametrize(
    ("verb", "body", "expect"),
    [
        ("filter", b"{not json", "malformed request"),
        ("filter", b'{"Pod": 5, "NodeNames": ["n1"]}', "got `int` - at `$.Pod`"),
        ("filter", b'{"Pod": {}, "NodeNames": "n1"}', "at `$.NodeNames`"),
        ("prioritize", b"[1,2,3]", "malformed request"),
        ("bind", b'{"PodName": 1}', "at `$.PodName`"),
        ("bind", b'{"PodName": "x"}', "missing PodNamespace, PodUID, Node"),
        ("preempt", b'{"Pod": {"metadata": {"name": 7}}}', "at `$.Pod.metadata.name`"),
    ],
)
def test_malformed_bodies_get_400_naming_the_field(
    ext: Extender, verb: str, body: bytes, expect: str
) -> None:
    r = ext.post(verb, body)
    assert r.status_code == 400
    assert expect in r.json()["Error"]
    still_serving(ext)


def test_missing_pod_and_bad_annotation_use_the_protocol_error(ext: Extender) -> None:
    r = ext.post("filter", {"NodeNames": ["n1"]})
    assert r.status_code == 200 and r.json()["Error"] == "request has no Pod"
    bad = gpu_pod("bad", annotations={"headroom.dev/gpu-memory": "twenty"})
    err = ext.post("filter", ext.schedule_args(bad, ["n1"])).json()["Error"]
    assert err.startswith(
        "pod ml/bad: annotation headroom.dev/gpu-memory: not a Kubernetes quantity"
    )
    assert ext.post("prioritize", {"NodeNames": ["n1"]}).status_code == 400


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("items", [[], [{"metadata": {"name": "n1"}}]])
def test_both_nodes_and_node_names_are_refused(ext: Extender, verb: str, items: list) -> None:
    """kube-scheduler sends one list or the other; with both, the reply could not say
    which it answers (the fuzz test found a 500 here: a filter echoing an empty Nodes)."""
    for pod in (
        gpu_pod("both", memory="1Gi"),
        {
            "metadata": {"name": "dra", "namespace": "ml", "uid": "u-dra"},
            "spec": {"containers": [], "resourceClaims": [{}]},
        },
    ):
        r = ext.post(verb, {"Pod": pod, "Nodes": {"items": items}, "NodeNames": ["n1"]})
        assert r.status_code == 400 and "both Nodes and NodeNames" in r.json()["Error"]
    still_serving(ext)


def test_a_100_mb_body_is_refused_with_413(ext: Extender) -> None:
    huge = b'{"Pod": {}, "NodeNames": ["' + b"x" * (100 * 1024 * 1024) + b'"]}'
    r = ext.post("filter", huge)
    assert r.status_code == 413 and "exceeds" in r.json()["Error"]
    still_serving(ext)


def test_unknown_node_names_fail_with_a_reason(ext: Extender) -> None:
    body = ext.post("filter", ext.schedule_args(gpu_pod("p"), ["n1", "ghost"])).json()
    assert body["NodeNames"] == ["n1"]
    assert "no report from the headroom agent" in body["FailedAndUnresolvableNodes"]["ghost"]
    r = ext.post(
        "bind", {"PodName": "p", "PodNamespace": "ml", "PodUID": "uid-p", "Node": "ghost"}
    ).json()
    assert "node ghost" in r["Error"]
    unseen = ext.post(
        "bind", {"PodName": "q", "PodNamespace": "ml", "PodUID": "uid-q", "Node": "n1"}
    ).json()
    assert "was not seen by filter" in unseen["Error"]
    assert ext.built.service.ledger.active() == []


def report_body(**overrides: object) -> dict:
    gpu = {
        "uuid": "GPU-x",
        "index": 0,
        "model": "A10G",
        "memory_total_mib": 24576,
        "memory_used_mib": 100,
    }
    body: dict = {"node": "n9", "sampled_at": 1.0, "schema": SCHEMA_V1, "gpus": [gpu]}
    body.update(overrides)
    return body


def post_report(ext: Extender, body: object, token: str | None = TOKEN) -> tuple[int, str]:
    # the client sends the right token by default; override it (empty = no credentials)
    headers = {"Authorization": f"Bearer {token}" if token else ""}
    content = body if isinstance(body, bytes) else msgspec.json.encode(body)
    r = ext.client.post("/v1/reports", content=content, headers=headers)
    return r.status_code, r.text


def test_report_refusals_change_nothing(ext: Extender) -> None:
    cases = [
        (report_body(), "wrong-token", 401, "bearer token"),
        (report_body(), None, 401, "bearer token"),
        (b"{", TOKEN, 422, "invalid report"),
        (report_body(gpus="many"), TOKEN, 422, "$.gpus"),
        (report_body(schema="v0"), TOKEN, 422, "schema: unsupported"),
        (
            report_body(gpus=[{**report_body()["gpus"][0], "memory_used_mib": 30000}]),
            TOKEN,
            422,
            "gpus[0].memory_used_mib",
        ),
        (report_body(gpus=[report_body()["gpus"][0]] * 2), TOKEN, 422, "duplicate"),
        (b'{"node": "n9", "pad": "' + b"x" * (5 * 1024 * 1024) + b'"}', TOKEN, 413, "exceeds"),
    ]
    for body, token, status, text in cases:
        code, reply = post_report(ext, body, token)
        assert code == status, (code, reply)
        assert text in reply
        assert TOKEN not in reply
    assert "n9" not in ext.built.service.inventory.node_names()
    assert post_report(ext, report_body())[0] == 200
    assert "n9" in ext.built.service.inventory.node_names()


def test_admission_webhook_is_served_by_the_extender(ext: Extender) -> None:
    """The guardrail route is mounted on the extender's own server (the Service's port)."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "r1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "ml",
            "object": {
                "metadata": {"name": "sneaky", "namespace": "ml"},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "x",
                            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                        }
                    ]
                },
            },
        },
    }
    r = ext.client.post("/admit/pods", json=review)
    assert r.status_code == 200
    response = r.json()["response"]
    assert response["uid"] == "r1" and response["allowed"] is False
    assert "NVIDIA_VISIBLE_DEVICES" in response["status"]["message"]
    assert ext.client.post("/admit/pods", content=b"{").status_code == 400


def _hostile(kind: str, text: str) -> dict:
    """A pod whose ask is ``text`` in the annotation, the GPU limit or a MIG count."""
    if kind == "annotation":
        return gpu_pod("h", annotations={"headroom.dev/gpu-memory": text})
    pod = gpu_pod("h")
    resource = "nvidia.com/gpu" if kind == "gpu" else "nvidia.com/mig-1g.10gb"
    pod["spec"]["containers"][0]["resources"] = {"limits": {resource: text}}
    return pod


@pytest.mark.parametrize("kind", ["annotation", "gpu", "mig"])
@pytest.mark.parametrize("text", ["1e999999", "1e999999Gi", "9" * 5000, "\u0663Gi"])
def test_hostile_quantities_are_refused_at_once_and_the_server_keeps_serving(
    ext: Extender, kind: str, text: str
) -> None:
    """Issue 23 F1/F2: a quantity that once froze the event loop for 29 s, or answered
    500, is a protocol error naming the field; every verb stays up meanwhile."""
    pod = _hostile(kind, text)
    field = {"annotation": "headroom.dev/gpu-memory", "gpu": "nvidia.com/gpu"}.get(
        kind, "nvidia.com/mig-1g.10gb"
    )
    r = ext.post("filter", ext.schedule_args(pod, ["n1"]))
    assert r.status_code == 200 and field in r.json()["Error"]
    assert len(r.json()["Error"]) < 400  # the input is quoted short, never whole
    for verb in ("prioritize", "preempt"):
        args = (
            ext.schedule_args(pod, ["n1"])
            if verb == "prioritize"
            else {"Pod": pod, "NodeNameToMetaVictims": {"n1": {"Pods": []}}}
        )
        r = ext.post(verb, args)
        assert r.status_code < 500, r.text
        assert r.status_code == 400 and field in r.json()["Error"]
    assert ext.client.get("/healthz").status_code == 200
    still_serving(ext)
