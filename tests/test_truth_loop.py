"""The truth loop through the real extender (HTTP, SQLite ledger): an agent report saying
what kubelet's pod-resources lists for each pod becomes receipts beside the grants,
``mismatch`` findings where a pod holds another GPU than granted, and a bill that
follows what was received. The e2e suite runs the same loop with kubelet's own code."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec

from drivers.agent.loop import build_report
from extender.core.allocation import EventKind
from extender.core.received import Held
from extender.scheduling.received import gpu_of, known_ids, mismatches
from extender.state.inventory import Grant
from extender.wire.report import (
    MAX_DEVICE_IDS,
    ContainerReceived,
    DeviceIds,
    GpuReport,
    MigReport,
    NodeReport,
    PodReceived,
)
from tests.support import Extender, gpu_pod, running_extender

GIB = 1024
H = 3600.0


def holding(name: str, *ids: str, namespace: str = "ml") -> PodReceived:
    return PodReceived(
        namespace, name, [ContainerReceived("main", [DeviceIds("nvidia.com/gpu", list(ids))])]
    )


def bind(ext: Extender, name: str, memory: str | None) -> None:
    ext.post("filter", ext.schedule_args(gpu_pod(name, memory=memory), ["n1"]))
    body = {"PodName": name, "PodNamespace": "ml", "PodUID": f"uid-{name}", "Node": "n1"}
    assert ext.post("bind", body).json()["Error"] == ""


def send(ext: Extender, received: list[PodReceived] | None) -> NodeReport:
    driver = ext.drivers["n1"]
    rep = build_report(
        driver, "n1", driver.attribute, ext.clock, labels=ext.labels["n1"], received=received
    )
    assert ext.client.post("/v1/reports", content=msgspec.json.encode(rep)).status_code == 200
    ext.built.service.writer.flush()
    return rep


def rows(ext: Extender) -> dict[str, dict[str, Any]]:
    items = ext.client.get("/v1/allocations").json()["items"]
    return {a["pod_name"]: a for a in items}


def test_device_ids_of_every_plugin_name_the_gpu() -> None:
    mig = MigReport("MIG-9", "1g.10gb", 9856, 0)
    gpus = [
        GpuReport("GPU-a", 0, "A100", 81920, 0),
        GpuReport("GPU-b", 1, "A100", 81920, 0, mig_enabled=True, mig=[mig]),
    ]
    known = known_ids(NodeReport(node="n", sampled_at=0.0, gpus=gpus))
    assert gpu_of("GPU-a::3", known) == "GPU-a"  # headroom's slot / a time-slicing replica
    assert gpu_of("GPU-a", known) == "GPU-a"  # the stock plugin, no sharing
    assert gpu_of("1", known) == "GPU-b"  # deviceIDStrategy: index
    assert gpu_of("MIG-9::1", known) == "MIG-9"  # a MIG device (replicated)
    assert gpu_of("mlx5_0", known) is None  # not a GPU of this node


def test_granted_vs_received_mismatch_and_bill(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        g0, g1 = ext.add_node("n1", "2xA10G:24Gi").gpu_uuids
        t0 = ext.clock.now()
        bind(ext, "whole", None)  # a whole GPU
        bind(ext, "slice", "12Gi")  # 12 GiB of the other GPU
        before = rows(ext)
        whole_gpu, slice_gpu = before["whole"]["gpu_uuid"], before["slice"]["gpu_uuid"]
        assert {whole_gpu, slice_gpu} == {g0, g1}

        # an older agent (no pod-resources): nothing is judged, nothing is received
        send(ext, None)
        assert all(a["received"] is None for a in rows(ext).values())

        # kubelet: "whole" holds its GPU (by index), "slice" a replica on the whole GPU;
        # a pod headroom never granted is not judged
        index = {g0: "0", g1: "1"}
        got = [
            holding("whole", index[whole_gpu]),
            holding("slice", f"{whole_gpu}::7"),
            holding("stranger", f"{slice_gpu}::1"),
        ]
        send(ext, got)
        after = rows(ext)
        assert after["whole"]["received"]["matches_grant"] is True
        moved = after["slice"]["received"]
        assert (moved["gpu_uuid"], moved["devices"], moved["matches_grant"]) == (
            whole_gpu,
            f"{whole_gpu}::7",
            False,
        )
        # the same GPU model and size: the slice's memory and price are unchanged
        assert moved["memory_mib"] == 12 * GIB
        assert moved["price_per_hour"] == after["slice"]["price_per_hour"]

        found = ext.client.get("/v1/discrepancies").json()["items"]
        (mismatch,) = [d for d in found if d["kind"] == EventKind.MISMATCH.value]
        assert (mismatch["pod_uid"], mismatch["gpu_uuid"]) == ("uid-slice", slice_gpu)
        assert mismatch["detail"] == (
            f"granted {slice_gpu} ({12 * GIB} MiB), received {whole_gpu} ({whole_gpu}::7)"
        )
        # the process of "slice" on the GPU it received is no leak: it is the mismatch
        ext.drivers["n1"].start_process("uid-slice", whole_gpu, 4 * GIB)
        send(ext, got)
        found = ext.client.get("/v1/discrepancies").json()["items"]
        assert [d["kind"] for d in found if d["pod_uid"] == "uid-slice"] == ["mismatch"]

        # reports repeating the same holding write no new receipt
        events = ext.client.get("/v1/events", params={"limit": 1000}).json()["items"]
        assert [e["kind"] for e in events].count(EventKind.RECEIVED.value) == 2

        # the bill follows what was received, an hour of it
        ext.clock.advance(H)
        bill = ext.client.get(
            "/v1/chargeback", params={"from": str(t0), "to": str(t0 + H), "group_by": "pod"}
        ).json()
        by_pod = {g["key"]: g for g in bill["groups"]}
        hourly = Decimal(moved["price_per_hour"]).quantize(Decimal("0.01"))
        assert (by_pod["ml/slice"]["cost"], by_pod["ml/slice"]["gib_hours"]) == (
            str(hourly),
            "12.0000",
        )
        assert ext.built.service.ledger.verify_chain().ok


def test_a_mismatch_names_both_sides() -> None:
    two = [Grant("u", "ml", "p", "n1", "GPU-A", 1024), Grant("u", "ml", "p", "n1", "GPU-B", 1024)]
    # both replicas on GPU-A: GPU-B was granted and nothing on it was received
    both_on_a = Held("u", "n1", (("GPU-A::0", "GPU-A"), ("GPU-A::1", "GPU-A")))
    assert [(d.gpu_uuid, d.detail) for d in mismatches([both_on_a], two)] == [
        ("GPU-B", "granted GPU-B (1024 MiB), received no device on it")
    ]
    # one GPU granted, two held: the extra one is named, with no memory granted on it
    extra = Held("u", "n1", (("GPU-A::0", "GPU-A"), ("GPU-C::0", "GPU-C")))
    assert [(d.gpu_uuid, d.amount_mib, d.detail) for d in mismatches([extra], two[:1])] == [
        ("GPU-C", 0, "received GPU-C (GPU-C::0), granted only GPU-A")
    ]
    # our plugin's answer: each granted GPU held once, in any order: nothing to say
    exact = Held("u", "n1", (("GPU-B::1", "GPU-B"), ("GPU-A::0", "GPU-A")))
    assert mismatches([exact], two) == []


def test_an_oversized_received_list_is_refused_naming_it(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        ext.add_node("n1", "1xA10G:24Gi")
        ids = [f"GPU-x::{i}" for i in range(MAX_DEVICE_IDS + 1)]
        rep = build_report(
            ext.drivers["n1"], "n1", ext.drivers["n1"].attribute, ext.clock,
            received=[holding("p", *ids)],
        )  # fmt: skip
        r = ext.client.post("/v1/reports", content=msgspec.json.encode(rep))
        assert r.status_code == 422
        assert "$.received[0].containers[0].devices[0].device_ids" in r.json()["detail"]
