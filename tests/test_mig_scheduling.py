"""MIG pods through filter -> prioritize -> bind over HTTP: only nodes with an idle
instance of the asked profile pass, the others say why, and bind grants that instance.
(MIG demands are scored node by node; plain ones in batches.)"""

from __future__ import annotations

from pathlib import Path

import msgspec

from extender.wire.report import GpuReport, MigReport, NodeReport
from tests.support import gpu_pod, running_extender


def mig_node(name: str, busy: tuple[bool, bool], at: float) -> NodeReport:
    """One A100 in MIG mode with two 1g.10gb instances (busy or idle)."""
    instances = [
        MigReport(f"MIG-{name}-{i}", "1g.10gb", 9984, 8000 if used else 10)
        for i, used in enumerate(busy)
    ]
    gpu = GpuReport(
        f"GPU-{name}", 0, "A100-SXM4-80GB", 81920, 16000, mig_enabled=True, mig=instances
    )
    return NodeReport(
        node=name,
        sampled_at=at,
        gpus=[gpu],
        labels={
            "node.kubernetes.io/instance-type": "p4d.24xlarge",
            "karpenter.sh/capacity-type": "on-demand",
        },
    )


def mig_pod(name: str) -> dict:
    pod = gpu_pod(name, gpus=0)
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
    return pod


def test_a_mig_pod_goes_to_an_idle_instance_of_its_profile(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        now = ext.clock.now()
        for name, busy in (("free", (True, False)), ("full", (True, True))):
            r = ext.client.post(
                "/v1/reports", content=msgspec.json.encode(mig_node(name, busy, now))
            )
            assert r.status_code == 200
        ext.add_node("plain", "1xA10G:24Gi")
        nodes = ["free", "full", "plain"]

        reply = ext.post("filter", ext.schedule_args(mig_pod("m"), nodes)).json()
        assert reply["NodeNames"] == ["free"]
        failed = {**reply["FailedNodes"], **reply["FailedAndUnresolvableNodes"]}
        assert "0 idle MIG 1g.10gb instance(s) of 2 < 1 asked" in failed["full"]
        assert "of 0 < 1 asked" in failed["plain"]
        assert "plain" in reply["FailedAndUnresolvableNodes"]  # no such instance at all

        scores = ext.post("prioritize", ext.schedule_args(mig_pod("m"), ["free"])).json()
        assert scores == [{"Host": "free", "Score": 10}]
        bind = {"PodName": "m", "PodNamespace": "ml", "PodUID": "uid-m", "Node": "free"}
        assert ext.post("bind", bind).json()["Error"] == ""
        (grant,) = ext.built.service.inventory.grants_of("uid-m")
        assert grant.gpu_uuid == "MIG-free-1"  # the idle one

        again = ext.post("filter", ext.schedule_args(mig_pod("m2"), nodes)).json()
        assert again["NodeNames"] == []  # its only idle instance is now granted
