"""A GPU belongs to one node (issue 23 F8): an agent that names another node's GPU UUIDs
is refused and cannot shrink that node's headroom; reservations are kept per (node, GPU).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from drivers.agent.loop import build_report
from extender.pricing import load_pricebook
from extender.state.inventory import Grant, Inventory, ReportRefused
from extender.wire.report import GpuReport, NodeReport
from tests.support import Extender, gpu_pod, running_extender


def _report_as(ext: Extender, driver_of: str, node: str) -> dict:
    """A report for ``node`` carrying the GPUs of ``driver_of``'s driver."""
    driver = ext.drivers[driver_of]
    rep = build_report(driver, node, driver.attribute, ext.clock, labels=ext.labels[driver_of])
    return msgspec.to_builtins(rep)


def _post(ext: Extender, report: dict) -> tuple[int, dict]:
    r = ext.client.post("/v1/reports", content=msgspec.json.encode(report))
    return r.status_code, r.json()


def test_a_report_naming_another_nodes_gpu_is_refused(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        ext.add_node("n1", "1xA10G:24Gi")
        ext.add_node("n2", "1xA10G:24Gi", seed=2)
        ext.post("filter", ext.schedule_args(gpu_pod("a", memory="20Gi"), ["n1"]))
        bind = {"PodName": "a", "PodNamespace": "ml", "PodUID": "uid-a", "Node": "n1"}
        assert ext.post("bind", bind).json()["Error"] == ""
        (uuid,) = ext.drivers["n1"].gpu_uuids

        status, body = _post(ext, _report_as(ext, "n1", "n2"))
        assert status == 409
        assert uuid in body["detail"] and "'n1'" in body["detail"]
        # n2 keeps its own GPU; n1's grant and headroom are untouched
        view2 = ext.built.service.inventory.view("n2")
        assert view2 is not None and [g.uuid for g in view2.gpus] != [uuid]
        view1 = ext.built.service.inventory.view("n1")
        assert view1 is not None and view1.gpus[0].reserved_mib == 20 * 1024
        ext.report("n1")  # the owner itself keeps reporting
        assert ext.client.get("/healthz").status_code == 200


def test_a_gpu_moves_once_its_old_node_has_gone_quiet(tmp_path: Path) -> None:
    with running_extender(tmp_path, stale_after=30) as ext:
        ext.add_node("n1", "1xA10G:24Gi")
        ext.add_node("n2", "1xA10G:24Gi", seed=2)
        ext.clock.advance(31)  # n1's agent is silent past the staleness bound
        ext.report("n2")
        status, _ = _post(ext, _report_as(ext, "n1", "n2"))
        assert status == 200


def test_reservations_are_kept_per_node_and_gpu() -> None:
    """A GPU UUID that turns up on another node (its old node gone quiet) does not carry
    the old node's reservations with it: headroom is per (node, GPU)."""
    inv = Inventory(load_pricebook(None, 0.6))
    inv.apply_report(_report("n1"), 100.0, stale_after=30)
    assert inv.reserve([Grant("u1", "ml", "p", "n1", "GPU-X", 4096)])
    inv.apply_report(_report("n2"), 200.0, stale_after=30)  # n1 silent for 100 s
    view = inv.view("n2")
    assert view is not None and view.gpus[0].reserved_mib == 0
    assert inv.grants_of("u1")[0].memory_mib == 4096


def _report(node: str) -> NodeReport:
    gpu = GpuReport("GPU-X", 0, "A10G", memory_total_mib=24576, memory_used_mib=0)
    return NodeReport(node=node, sampled_at=100.0, gpus=[gpu])


def test_inventory_refuses_before_applying_anything() -> None:
    inv = Inventory(load_pricebook(None, 0.6))
    inv.apply_report(_report("n1"), 100.0, stale_after=30)
    try:
        inv.apply_report(_report("n2"), 110.0, stale_after=30)
    except ReportRefused as e:
        assert "GPU-X" in str(e)
    else:
        raise AssertionError("a second node's report of GPU-X was accepted")
    assert inv.view("n2") is None  # nothing of the refused report was applied


def test_every_report_string_is_bounded(tmp_path: Path) -> None:
    """Issue 23 F9: a 3 MB instance-type label changing every report grew the ledger from
    0.1 to 39 MB in 10 reports. Now any report string over 256 characters is refused."""
    with running_extender(tmp_path) as ext:
        ext.add_node("n1", "1xA10G:24Gi")
        for mutate in (
            lambda r: r["labels"].update({"node.kubernetes.io/instance-type": "x" * 3_000_000}),
            lambda r: r["labels"].update({"k" * 300: "v"}),
            lambda r: r["labels"].update({f"l{i}": "v" for i in range(600)}),
            lambda r: r.update({"agent_version": "v" * 1000}),
            lambda r: r["gpus"][0].update({"health_reason": "h" * 1000}),
        ):
            report = _report_as(ext, "n1", "n1")
            mutate(report)
            r = ext.client.post("/v1/reports", content=msgspec.json.encode(report))
            assert r.status_code == 422 and "invalid report" in r.json()["detail"]
            assert len(r.text) < 1000  # the refusal does not echo the input
        assert ext.report("n1").status_code == 200
