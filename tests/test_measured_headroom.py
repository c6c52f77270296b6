"""The point of headroom: scheduling follows what the GPU really holds, not the sum of
requests. Three pods share one GPU; the agent's report moves the extender's headroom:
each pod holds max(its grant, its use), and the driver's memory is held too."""

from __future__ import annotations

from pathlib import Path

import msgspec

from drivers.agent.loop import Agent
from tests.support import gpu_pod, running_extender

GIB = 1024


def test_three_pods_on_one_gpu_headroom_follows_measured_use(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        driver = ext.add_node("n1", "1xA10G:24Gi")
        uuid = driver.gpu_uuids[0]
        for name in ("a", "b", "c"):  # each asks 4 GiB: 12 GiB reserved by requests
            ext.post("filter", ext.schedule_args(gpu_pod(name, memory="4Gi"), ["n1"]))
            bind = {"PodName": name, "PodNamespace": "ml", "PodUID": f"uid-{name}", "Node": "n1"}
            assert ext.post("bind", bind).json()["Error"] == ""
        view = ext.built.service.inventory.view("n1")  # the driver's reserve: unattributed
        assert view is not None and view.gpus[0].committed_mib == 12 * GIB + driver.reserve_mib

        # the pods really use 6 + 5 + 3 GiB: pods a and b overran their 4 GiB
        for name, gib in (("a", 6), ("b", 5), ("c", 3)):
            driver.start_process(f"uid-{name}", uuid, gib * GIB)
        agent = Agent(driver, "n1", driver.attribute, ext.clock, labels=ext.labels["n1"])
        report = agent.sample()
        per_pod = [p.used_mib or 0 for p in report.gpus[0].processes if p.pod_uid]
        assert sum(per_pod) == 14 * GIB  # per pod, summing to the device, not 3x it
        assert report.gpus[0].memory_used_mib == 14 * GIB + driver.reserve_mib
        r = ext.client.post("/v1/reports", content=msgspec.json.encode(report))
        assert r.status_code == 200

        view = ext.built.service.inventory.view("n1")
        assert view is not None
        # per pod max(grant, use): 6 + 5 + 4 (c is idle within its grant and may grow
        # into it) + the driver's 0.25 GiB = 15.25 GiB, more than the 14.25 GiB measured
        assert view.gpus[0].committed_mib == (6 + 5 + 4) * GIB + driver.reserve_mib
        # 24 - 15.25 - 0.5 GiB margin = 8.25 GiB: a 10 GiB pod no longer fits, although
        # the requests alone (12 GiB) would leave 11.5 GiB; the reason names who overran
        body = ext.post("filter", ext.schedule_args(gpu_pod("d", memory="10Gi"), ["n1"])).json()
        assert body["NodeNames"] == []
        reason = body["FailedNodes"]["n1"]
        assert "8.2 GiB free < 10.0 GiB" in reason
        assert "pod ml/a uses 6.0 GiB of its 4.0 GiB grant (+2.0 GiB)" in reason
        assert "1 more pod(s) over their grant" in reason

        ext.built.service.writer.flush()
        found = ext.client.get("/v1/discrepancies").json()["items"]
        overruns = [d for d in found if d["kind"] == "overrun"]
        assert sorted((d["pod_uid"], d["last_amount_mib"]) for d in overruns) == [
            ("uid-a", 2 * GIB),
            ("uid-b", 1 * GIB),
        ]
        (row,) = ext.built.service.ledger.for_pod("uid-a")
        assert row.obs_peak_mib == 6 * GIB  # usage rolled up beside the grant, not billed
