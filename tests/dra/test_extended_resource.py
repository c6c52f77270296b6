"""KEP-5004 (GA in 1.37): plain ``nvidia.com/gpu`` served by DRA on nodes whose allocatable
lacks it. Bind then grants nothing itself (the scheduler-made claim is ledgered); on a
device-plugin node, or with no DeviceClass naming the resource, bind grants as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from extender.dra.state import DraState
from extender.dra.template import DRIVER, device_class
from extender.scheduling.binder import InProcessBinder
from extender.state.nodefacts import facts_from_node
from extender.wire.annotations import ANN_GPU_UUIDS
from extender.wire.protocol import Node
from tests.support import Extender, gpu_pod, real_node, running_extender


def _node(ext: Extender, name: str, gpus: str | None) -> None:
    """The node's agent reports 4 A10Gs; its Node object lists ``gpus`` nvidia.com/gpu
    (None: not at all, as on a node where only the DRA driver runs)."""
    ext.add_node(name, "4xA10G:24Gi")
    obj: dict[str, Any] = real_node(name)
    if gpus is None:
        del obj["status"]["allocatable"]["nvidia.com/gpu"]
    else:
        obj["status"]["allocatable"]["nvidia.com/gpu"] = gpus
    ext.built.service.node_changed(facts_from_node(msgspec.convert(obj, Node)))


def _filter_and_bind(ext: Extender, name: str, node: str) -> dict[str, Any]:
    pod = gpu_pod(name)
    assert ext.post("filter", ext.schedule_args(pod, [node])).json()["NodeNames"] == [node]
    args = {"PodName": name, "PodNamespace": "ml", "PodUID": f"uid-{name}", "Node": node}
    reply: dict[str, Any] = ext.post("bind", args).json()
    return reply


def test_dra_backed_gpu_is_bound_without_a_grant_of_ours(tmp_path: Path) -> None:
    binder = InProcessBinder()
    with running_extender(tmp_path, binder=binder, policy="binpack") as ext:
        _node(ext, "n-dra-zero", "0")
        _node(ext, "n-dra-absent", None)
        _node(ext, "n-plugin", "4")
        dra = DraState()
        dra.put_class(device_class(DRIVER, extended_resource_name="nvidia.com/gpu"))
        ext.built.service.watch_cluster(dra, lambda uid: None)
        ledger = ext.built.service.ledger
        for pod, node in [("a", "n-dra-zero"), ("b", "n-dra-absent")]:
            assert _filter_and_bind(ext, pod, node) == {"Error": ""}
            assert binder.node_of(f"uid-{pod}") == node
            assert binder.annotations_of(f"uid-{pod}") == {}  # no device-plugin grant
            assert ledger.for_pod(f"uid-{pod}") == []  # the claim's ingestion records it
        assert _filter_and_bind(ext, "c", "n-plugin") == {"Error": ""}
        (row,) = ledger.for_pod("uid-c")
        assert binder.annotations_of("uid-c")[ANN_GPU_UUIDS] == row.grant.gpu_uuid


def test_without_a_device_class_for_the_resource_bind_grants_as_before(tmp_path: Path) -> None:
    binder = InProcessBinder()
    with running_extender(tmp_path, binder=binder, policy="binpack") as ext:
        _node(ext, "n-zero", "0")
        dra = DraState()
        dra.put_class(device_class(DRIVER))  # no extendedResourceName: DRA serves no pod
        ext.built.service.watch_cluster(dra, lambda uid: None)
        assert _filter_and_bind(ext, "d", "n-zero") == {"Error": ""}
        (row,) = ext.built.service.ledger.for_pod("uid-d")
        assert binder.annotations_of("uid-d")[ANN_GPU_UUIDS] == row.grant.gpu_uuid
