"""An allocated ResourceClaim becomes the right ledger Decisions (and bills once, not N times)."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from extender.core.allocation import Decision, NodeRef, PodRef, Sharing
from extender.dra.ingest import ClaimIngestError, decisions_from_claim, gpu_index
from extender.ledger import open_ledger
from extender.wire.clock import ManualClock
from tests.support import known as priced

from . import nvidia

P5_GPU_HOUR = Decimal("6.88")  # p5.48xlarge on-demand 55.04 $/h / 8 GPUs (docs/protocol.md §3.2)
P4DE_GPU_HOUR = Decimal("3.43088125")  # p4de.24xlarge 27.44705 / 8
AT = 1_767_225_600.0
PODS = [
    ("trainer-0", "0b6c7d8e-1111-4a2b-9c3d-000000000001"),
    ("trainer-1", "0b6c7d8e-1111-4a2b-9c3d-000000000002"),
]


def _node_ref(name: str) -> NodeRef:
    return NodeRef(
        name=name,
        instance_type="p5.48xlarge",
        capacity_type="on-demand",
        zone="us-east-1a",
        nodepool="gpu",
    )


def _ingest(
    claim: dict[str, Any],
    slices: list[dict[str, Any]],
    pods: dict[str, PodRef] | None = None,
    price: Decimal | None = P5_GPU_HOUR,
) -> list[Decision]:
    return decisions_from_claim(claim, slices, pods or {}, _node_ref, lambda node: price, AT)


def test_claim_fixture_is_a_valid_v1_resource_claim() -> None:
    assert kubernetes_validate.validate(nvidia.allocated_claim(PODS), "1.37", strict=True)


def test_shared_claim_gives_each_pod_a_decision_and_splits_the_grant() -> None:
    known = PodRef(
        uid=PODS[0][1],
        namespace="ml",
        name="trainer-0",
        owner_kind="Job",
        owner_name="trainer",
        labels={"team": "vision"},
    )
    decisions = _ingest(
        nvidia.allocated_claim(PODS), [nvidia.h100_slice()], pods={known.uid: known}
    )
    assert [d.pod for d in decisions] == [
        known,
        PodRef(uid=PODS[1][1], namespace="ml", name="trainer-1"),
    ]
    whole = P5_GPU_HOUR * 20480 / 81559
    for d in decisions:
        assert d.node == _node_ref(nvidia.H100_NODE)
        assert (d.decided_at, d.policy) == (AT, "dra")
        (g,) = d.grants
        assert g.gpu_uuid == nvidia.H100_UUIDS[1]
        assert g.gpu_index == 1
        assert g.model == "NVIDIA H100 80GB HBM3"
        assert g.gpu_total_mib == 81559
        assert g.memory_mib == 10240  # consumedCapacity 20Gi, half each
        assert g.sharing is Sharing.DRA
        assert g.claim == "ml/trainer-0-gpu-8kq2p"
        # the share's own id: each consumer of a shareable device names its share
        share = "7d3e1f0a-4c5b-4e6f-8a9b-0c1d2e3f4a5b"
        assert g.dra_device == f"gpu.nvidia.com/{nvidia.H100_NODE}/gpu-1/{share}"
        assert g.mig_profile == ""
        assert abs(priced(g.price_per_hour) - whole / 2) < Decimal("1e-11")
    assert sum(priced(d.grants[0].price_per_hour) for d in decisions) == whole


def test_three_pods_split_exactly() -> None:
    pods = [*PODS, ("trainer-2", "0b6c7d8e-1111-4a2b-9c3d-000000000003")]
    decisions = _ingest(nvidia.allocated_claim(pods), [nvidia.h100_slice()])
    grants = [d.grants[0] for d in decisions]
    assert [g.memory_mib for g in grants] == [6827, 6827, 6826]
    assert sum(priced(g.price_per_hour) for g in grants) == P5_GPU_HOUR * 20480 / 81559


def test_whole_device_without_consumed_capacity() -> None:
    claim = nvidia.allocated_claim(PODS[:1])
    del claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]
    del claim["status"]["allocation"]["devices"]["results"][0]["shareID"]
    (decision,) = _ingest(claim, [nvidia.h100_slice()])
    (g,) = decision.grants
    assert (g.memory_mib, g.gpu_total_mib, g.price_per_hour) == (81559, 81559, P5_GPU_HOUR)
    assert g.dra_device == f"gpu.nvidia.com/{nvidia.H100_NODE}/gpu-1"  # no share: no share id


def test_not_in_use_or_not_allocated_is_nothing() -> None:
    claim = nvidia.allocated_claim([])
    assert _ingest(claim, [nvidia.h100_slice()]) == []
    pending = nvidia.allocated_claim(PODS)
    del pending["status"]["allocation"]
    assert _ingest(pending, [nvidia.h100_slice()]) == []
    assert _ingest({"metadata": {"name": "x", "namespace": "ml"}}, []) == []


def test_unknown_price_is_unpriced_not_zero_and_not_an_error() -> None:
    decisions = _ingest(nvidia.allocated_claim(PODS), [nvidia.h100_slice()], price=None)
    assert [d.grants[0].price_per_hour for d in decisions] == [None, None]


def test_node_from_slice_then_hostname_label() -> None:
    claim = nvidia.allocated_claim(PODS[:1])
    claim["status"]["allocation"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["host-label"]}
                ]
            }
        ]
    }
    seen: list[str] = []

    def node_ref(name: str) -> NodeRef:
        seen.append(name)
        return NodeRef(name=name)

    decisions_from_claim(claim, [nvidia.h100_slice()], {}, node_ref, lambda n: None, AT)
    assert seen == [nvidia.H100_NODE]  # the slice's nodeName wins over the hostname label
    other_node_slice = nvidia.h100_slice()
    other_node_slice["spec"]["nodeName"] = "elsewhere"
    other_node_slice["spec"]["devices"] = []
    with pytest.raises(ClaimIngestError, match="is not in any current ResourceSlice"):
        decisions_from_claim(claim, [other_node_slice], {}, node_ref, lambda n: None, AT)
    del claim["status"]["allocation"]["nodeSelector"]
    with pytest.raises(ClaimIngestError, match="cannot tell which node"):
        decisions_from_claim(claim, [other_node_slice], {}, node_ref, lambda n: None, AT)


def test_stale_generation_device_is_not_used() -> None:
    old = nvidia.h100_slice(generation=3)
    new = nvidia.h100_slice(generation=4)
    new["spec"]["devices"] = new["spec"]["devices"][:1]  # gpu-1 no longer published
    with pytest.raises(
        ClaimIngestError, match=re.escape(f"gpu.nvidia.com/{nvidia.H100_NODE}/gpu-1")
    ):
        _ingest(nvidia.allocated_claim(PODS), [old, new])


def test_non_gpu_devices_in_the_claim_are_not_billed() -> None:
    claim = nvidia.allocated_claim(PODS[:1])
    claim["status"]["allocation"]["devices"]["results"].append(
        {
            "request": "nic",
            "driver": "dranet.example.com",
            "pool": nvidia.H100_NODE,
            "device": "eth1",
        }
    )
    nic_slice = nvidia.slice_for(
        nvidia.H100_NODE,
        [{"name": "eth1", "attributes": {"ifName": {"string": "eth1"}}}],
        name_suffix="dranet-4f9zq",
    )
    nic_slice["spec"]["driver"] = "dranet.example.com"
    kubernetes_validate.validate(nic_slice, "1.37", strict=True)
    (decision,) = _ingest(claim, [nvidia.h100_slice(), nic_slice])
    assert [g.dra_device.split("/")[0] for g in decision.grants] == ["gpu.nvidia.com"]


def _mig_claim(device: str) -> dict[str, Any]:
    claim = nvidia.allocated_claim(PODS[:1])
    result = claim["status"]["allocation"]["devices"]["results"][0]
    result.update(pool=nvidia.A100_NODE, device=device)
    del result["consumedCapacity"], result["shareID"]
    claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
        "values"
    ] = [nvidia.A100_NODE]
    return claim


def test_mig_device_with_published_parent() -> None:
    (d,) = _ingest(
        _mig_claim("gpu-0-mig-1g10gb-19-6"),
        [nvidia.a100_mig_slice(with_parent=True)],
        price=P4DE_GPU_HOUR,
    )
    (g,) = d.grants
    assert (g.gpu_uuid, g.mig_profile, g.gpu_index) == (nvidia.MIG_1G_UUID, "1g.10gb", 0)
    assert (g.memory_mib, g.gpu_total_mib) == (9728, 81920)
    assert g.price_per_hour == P4DE_GPU_HOUR * 9728 / 81920
    assert g.model == "NVIDIA A100-SXM4-80GB"


def test_mig_device_static_mig_estimates_the_parent_from_memory_slices() -> None:
    (d,) = _ingest(
        _mig_claim("gpu-0-mig-3g40gb-9-0"), [nvidia.a100_mig_slice()], price=P4DE_GPU_HOUR
    )
    (g,) = d.grants
    assert (g.memory_mib, g.gpu_total_mib) == (40192, 40192 * 8 // 4)
    assert g.price_per_hour == P4DE_GPU_HOUR / 2  # 4 of 8 memory slices


def test_mig_device_parent_memory_from_counter_set() -> None:
    devices_slice = nvidia.a100_mig_slice()
    mig = devices_slice["spec"]["devices"][1]
    mig["consumesCounters"] = [
        {
            "counterSet": "gpu-0-counter-set",
            "counters": {"memory": {"value": "9728Mi"}, "memorySlice6": {"value": "1"}},
        }
    ]
    counters = nvidia.slice_for(nvidia.A100_NODE, [], name_suffix="gpu.nvidia.com-c8x2m")
    del counters["spec"]["devices"]
    counters["spec"]["pool"]["resourceSliceCount"] = 2
    devices_slice["spec"]["pool"]["resourceSliceCount"] = 2
    counters["spec"]["sharedCounters"] = [
        {
            "name": "gpu-0-counter-set",
            "counters": {
                "memory": {"value": "81920Mi"},
                **{f"memorySlice{i}": {"value": "1"} for i in range(8)},
            },
        }
    ]
    for s in (devices_slice, counters):
        kubernetes_validate.validate(s, "1.37", strict=True)
    (d,) = _ingest(_mig_claim("gpu-0-mig-1g10gb-19-6"), [counters, devices_slice])
    assert d.grants[0].gpu_total_mib == 81920


def test_gpu_index_from_device_name() -> None:
    assert [gpu_index(n) for n in ("gpu-0", "gpu-7", "gpu-3-mig-1g10gb-19-6", "nic-1")] == [
        0,
        7,
        3,
        -1,
    ]


def test_decisions_record_in_a_real_ledger_and_bill_once(tmp_path: Path) -> None:
    ledger = open_ledger(str(tmp_path / "ledger.db"), ManualClock(AT))
    try:
        for decision in _ingest(nvidia.allocated_claim(PODS), [nvidia.h100_slice()]):
            ledger.record_decision(decision)
        rows = list(ledger.charge_rows(AT, AT + 3600))
        assert sorted(r.pod.name for r in rows) == ["trainer-0", "trainer-1"]
        assert sum(r.grant.memory_mib for r in rows) == 20480
        assert sum(priced(r.grant.price_per_hour) for r in rows) == P5_GPU_HOUR * 20480 / 81559
        assert {r.grant.gpu_uuid for r in rows} == {nvidia.H100_UUIDS[1]}
    finally:
        ledger.close()


def test_admin_access_results_are_not_billed() -> None:
    claim = nvidia.allocated_claim(PODS[:1])
    claim["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    kubernetes_validate.validate(claim, "1.37", strict=True)
    assert _ingest(claim, [nvidia.h100_slice()]) == []


def test_two_shares_of_one_gpu_in_one_claim_are_one_row() -> None:
    """Two requests of one claim can take two shares of the same shareable GPU; the ledger
    keeps one row per pod and GPU, so they become one grant whose memory and price add up."""
    claim = nvidia.allocated_claim(PODS[:1])
    (first,) = claim["status"]["allocation"]["devices"]["results"]
    second = {**first, "request": "gpu-2", "shareID": "8e4f2a1b-5d6c-4f7a-9b0c-1d2e3f4a5b6c"}
    second["consumedCapacity"] = {"memory": "4Gi"}
    claim["status"]["allocation"]["devices"]["results"].append(second)
    (decision,) = _ingest(claim, [nvidia.h100_slice()])
    (g,) = decision.grants
    assert g.memory_mib == 20480 + 4096
    assert priced(g.price_per_hour) == P5_GPU_HOUR * 20480 / 81559 + P5_GPU_HOUR * 4096 / 81559
    assert g.dra_device.count(",") == 1 and first["shareID"] in g.dra_device
