"""The device plugin's pure rules: slot ids, which pending grant a request is for, and
which slots to prefer. No kubelet, no API: plain data in, a decision out."""

from __future__ import annotations

import pytest

from drivers.deviceplugin.grants import NoMatch, PodView, grant_of, grants_of, match, preferred
from drivers.deviceplugin.service import acknowledged, answer_for
from drivers.deviceplugin.slots import gpu_of, slot_id, slots_of
from drivers.gpu.base import GpuDevice, Health
from extender.wire.annotations import ANN_ALLOCATED, ANN_GPU_MEMORY_MIB, ANN_GPU_UUIDS

G0, G1, G2 = "GPU-aaaa", "GPU-bbbb", "GPU-cccc"
NODE_GPUS = {G0, G1, G2}


def pod(
    name: str,
    gpus: list[str],
    mib: int = 10240,
    requested: int | None = None,
    allocated: list[str] | None = None,
    created: float = 0.0,
    active: bool = True,
) -> PodView:
    ann = {ANN_GPU_UUIDS: ",".join(gpus), ANN_GPU_MEMORY_MIB: str(mib)}
    if allocated:
        ann[ANN_ALLOCATED] = ",".join(allocated)
    return PodView(
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        annotations=ann,
        requested=len(gpus) if requested is None else requested,
        created=created,
        active=active,
    )


def test_slot_ids_round_trip_and_foreign_ids_are_not_slots() -> None:
    assert slot_id(G0, 3) == "GPU-aaaa::3"
    assert gpu_of("GPU-aaaa::3") == G0
    for foreign in ("GPU-aaaa", "GPU-aaaa::", "::1", "GPU-aaaa::x", "nvidia0"):
        assert gpu_of(foreign) is None


def test_slots_mark_an_unhealthy_gpu_and_skip_mig() -> None:
    devs = [
        GpuDevice(G1, 1, "A10G", 24576, 0, 24576, health=Health(False, "Xid 79")),
        GpuDevice(G0, 0, "A10G", 24576, 0, 24576),
        GpuDevice(G2, 2, "A100", 40960, 0, 40960, mig_enabled=True),
    ]
    slots = slots_of(devs, 2)
    assert [s.id for s in slots] == ["GPU-aaaa::0", "GPU-aaaa::1", "GPU-bbbb::0", "GPU-bbbb::1"]
    assert [s.healthy for s in slots] == [True, True, False, False]


def test_a_pod_without_a_grant_or_on_foreign_gpus_is_not_served() -> None:
    plain = PodView("u", "ns", "plain", {}, 1)
    assert grant_of(plain) is None
    mig = pod("mig", ["MIG-1234"])
    assert grants_of([plain, mig, pod("ok", [G0])], NODE_GPUS)[0].pod.name == "ok"
    assert len(grants_of([plain, mig], NODE_GPUS)) == 0


def test_match_takes_the_one_pending_grant_on_those_gpus() -> None:
    grants = grants_of([pod("a", [G0]), pod("b", [G1, G2])], NODE_GPUS)
    assert match(grants, ["GPU-aaaa::2"]).pod.name == "a"
    assert match(grants, ["GPU-cccc::0", "GPU-bbbb::3"]).pod.name == "b"


def test_match_fails_closed_on_the_wrong_gpu_and_names_the_pending_grants() -> None:
    grants = grants_of([pod("a", [G0])], NODE_GPUS)
    with pytest.raises(NoMatch, match=r"not on the GPUs granted.*ns/a -> GPU-aaaa"):
        match(grants, ["GPU-bbbb::0"])
    with pytest.raises(NoMatch, match="not headroom slots"):
        match(grants, ["nvidia0"])
    with pytest.raises(NoMatch, match="two slots on one GPU"):
        match(grants_of([pod("two", [G0, G1])], NODE_GPUS), ["GPU-aaaa::0", "GPU-aaaa::1"])


def test_match_never_picks_by_size_when_two_pending_grants_share_the_gpu() -> None:
    grants = grants_of([pod("a", [G0]), pod("b", [G0])], NODE_GPUS)
    with pytest.raises(NoMatch, match=r"fit the grants of 2 pods \(ns/a, ns/b\)"):
        match(grants, ["GPU-aaaa::1"])


def test_acknowledged_deleted_and_finished_grants_are_not_pending() -> None:
    grants = grants_of(
        [
            pod("done", [G0], allocated=["GPU-aaaa::0"]),
            pod("gone", [G0], active=False),
            pod("next", [G0]),
        ],
        NODE_GPUS,
    )
    assert match(grants, ["GPU-aaaa::1"]).pod.name == "next"


def test_a_two_container_pod_stays_pending_until_each_gpu_is_acknowledged() -> None:
    half = pod("two", [G0, G1], requested=2, allocated=["GPU-aaaa::0"])
    grants = grants_of([half], NODE_GPUS)
    assert grants[0].remaining_gpus() == [G1]
    assert match(grants, ["GPU-bbbb::2"]).pod.name == "two"
    with pytest.raises(NoMatch):
        match(grants, ["GPU-aaaa::1"])  # its first GPU is already handed out


def test_preferred_offers_one_free_slot_on_each_gpu_of_the_oldest_pending_grant() -> None:
    grants = grants_of(
        [pod("young", [G2], created=20.0), pod("old", [G1, G0], created=10.0)], NODE_GPUS
    )
    available = ["GPU-aaaa::1", "GPU-aaaa::0", "GPU-bbbb::3", "GPU-cccc::0"]
    assert preferred(grants, available, [], 2) == ["GPU-bbbb::3", "GPU-aaaa::0"]
    assert preferred(grants, available, [], 1) == ["GPU-bbbb::3"]  # old still first
    # nothing free on the granted GPU: no preference, kubelet chooses, Allocate judges
    assert preferred(grants_of([pod("x", [G1])], NODE_GPUS), ["GPU-aaaa::0"], [], 1) == []
    assert preferred([], available, [], 1) == []


def test_answer_names_the_granted_gpus_and_their_memory_limit() -> None:
    g = grants_of([pod("b", [G1, G2], mib=20480)], NODE_GPUS)[0]
    a = answer_for(g, ["GPU-cccc::0", "GPU-bbbb::1"])
    assert a.envs == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-bbbb,GPU-cccc",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "20480m",
        "CUDA_DEVICE_MEMORY_LIMIT_1": "20480m",
    }
    assert a.cdi_devices == ("nvidia.com/gpu=GPU-bbbb", "nvidia.com/gpu=GPU-cccc")
    assert acknowledged(g, ["GPU-cccc::0", "GPU-bbbb::1"]) == "GPU-bbbb::1,GPU-cccc::0"
    whole = grants_of([pod("w", [G0], mib=0)], NODE_GPUS)[0]
    assert "CUDA_DEVICE_MEMORY_LIMIT_0" not in answer_for(whole, ["GPU-aaaa::0"]).envs
