"""An overrun reaches placement (issue 24): after an agent reports a pod using 3x its
grant, ``/filter`` over real HTTP refuses a node it passed a moment before, through the
inventory's columns and the vectorised kernels, and the reason names the pod; evicting
the pod frees all it holds, so preemption counts it too."""

from __future__ import annotations

from pathlib import Path

from drivers.gpu.simulated import SimulatedDriver
from tests.support import Extender, gpu_pod, running_extender

GIB = 1024
UNATTRIBUTED = 4 * GIB + 256  # 4.25 GiB on the card that belongs to no pod


def bind(ext: Extender, name: str, memory: str) -> str:
    ext.post("filter", ext.schedule_args(gpu_pod(name, memory=memory), ["n1"]))
    body = {"PodName": name, "PodNamespace": "ml", "PodUID": f"uid-{name}", "Node": "n1"}
    error: str = ext.post("bind", body).json()["Error"]
    return error


def test_filter_refuses_the_node_once_a_pod_overruns_and_names_it(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        driver = SimulatedDriver(
            "1xH100:80Gi", seed=1, node="n1", clock=ext.clock, reserve_mib=UNATTRIBUTED
        )
        ext.drivers["n1"] = driver
        ext.labels["n1"] = {
            "node.kubernetes.io/instance-type": "p5.4xlarge",
            "karpenter.sh/capacity-type": "on-demand",
        }
        ext.report("n1")
        for name, memory in (("trainer", "10Gi"), ("a", "20Gi"), ("b", "20Gi")):
            assert bind(ext, name, memory) == ""

        # 50 GiB granted, all idle, + 4.25 GiB unattributed: 25.25 GiB free, a 9 GiB pod fits
        late = ext.schedule_args(gpu_pod("late", memory="9Gi"), ["n1"])
        assert ext.post("filter", late).json()["NodeNames"] == ["n1"]

        # the trainer, granted 10 GiB, uses 30 GiB. The old rule saw max(34.25 used,
        # 50 granted) = 50 and still passed the node; the grants, once filled, need 70
        driver.start_process("uid-trainer", driver.gpu_uuids[0], 30 * GIB)
        ext.report("n1")
        view = ext.built.service.inventory.view("n1")
        assert view is not None
        assert view.gpus[0].committed_mib == 30 * GIB + 40 * GIB + UNATTRIBUTED

        reply = ext.post("filter", late).json()
        assert reply["NodeNames"] == []
        reason = reply["FailedNodes"]["n1"]
        assert "5.2 GiB free < 9.0 GiB" in reason
        assert "pod ml/trainer uses 30.0 GiB of its 10.0 GiB grant (+20.0 GiB)" in reason

        assert "5.2 GiB free" in bind(ext, "late", "9Gi")  # bind re-checks: refused too

        # preemption: evicting the trainer frees all 30 GiB it holds, not just its
        # 10 GiB grant (74.25 - 30 = 44.25 GiB committed: a 30 GiB pod fits)
        def victims(*uids: str) -> dict:
            pods = [{"UID": f"uid-{u}"} for u in uids]
            meta = {"n1": {"Pods": pods, "NumPDBViolations": 0}}
            return {"Pod": gpu_pod("big", memory="30Gi"), "NodeNameToMetaVictims": meta}

        assert "n1" in ext.post("preempt", victims("trainer")).json()["NodeNameToMetaVictims"]
        # evicting one idle 20 GiB pod leaves 54.25 GiB committed: not enough
        assert ext.post("preempt", victims("a")).json() == {"NodeNameToMetaVictims": {}}
