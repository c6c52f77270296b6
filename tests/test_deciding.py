"""Deciding in the filter, over HTTP: a GPU pod that states no preference of its own gets
one node from the filter (the best; kube-scheduler then binds it without prioritize), a
pod with a preference gets the narrowed set to choose from, and so does every pod when
deciding is off (``HEADROOM_DECIDE=false``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support import Extender, gpu_pod, running_extender

TIED = ["n3", "n0", "n2", "n1"]  # identical and empty: they tie
NAMES = [*TIED, "busy"]

SOFT = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "preference": {"matchExpressions": []}}
        ]
    }
}


def cluster(ext: Extender) -> None:
    for name in TIED:
        ext.add_node(name, spec="4xA10G:24Gi")
    busy = ext.add_node("busy", spec="4xA10G:24Gi")
    for uuid in busy.gpu_uuids:
        busy.start_process("hog", uuid, 20 * 1024)  # 4 GiB left on each GPU: fits nowhere
    ext.report("busy")


def filtered(ext: Extender, pod: dict[str, Any]) -> dict[str, Any]:
    reply = ext.post("filter", ext.schedule_args(pod, NAMES))
    assert reply.status_code == 200
    body: dict[str, Any] = reply.json()
    assert not body.get("Error")
    return body


def test_a_pod_without_preferences_gets_one_node(tmp_path: Path) -> None:
    (tmp_path / "off").mkdir()
    (tmp_path / "on").mkdir()
    with running_extender(tmp_path / "off", decide=False) as off:
        cluster(off)
        narrowed = set(filtered(off, gpu_pod("p0", memory="10Gi"))["NodeNames"])
    assert len(narrowed) >= 2 and narrowed <= set(TIED)  # a choice left to the scheduler
    with running_extender(tmp_path / "on") as ext:
        cluster(ext)
        plain = filtered(ext, gpu_pod("p1", memory="10Gi"))
        assert plain["NodeNames"] == [TIED[0]]  # the first of the best, in list order
        assert "busy" in plain["FailedNodes"]  # reasons as before: only the passing set is one
        soft = gpu_pod("p2", memory="10Gi")
        soft["spec"]["affinity"] = SOFT
        assert set(filtered(ext, soft)["NodeNames"]) == narrowed
        bound = ext.post(
            "bind", {"PodName": "p1", "PodNamespace": "ml", "PodUID": "uid-p1", "Node": TIED[0]}
        )
        assert bound.status_code == 200 and not bound.json().get("Error")
        # the node holding the pod is now the best place for the next one (packing)
        assert filtered(ext, gpu_pod("p3", memory="10Gi"))["NodeNames"] == [TIED[0]]


def test_a_pod_that_fits_nowhere_gets_every_reason(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        cluster(ext)
        body = filtered(ext, gpu_pod("big", gpus=8))
        assert not body.get("NodeNames")
        failed = {**body["FailedNodes"], **body["FailedAndUnresolvableNodes"]}
        assert set(failed) == set(NAMES)
