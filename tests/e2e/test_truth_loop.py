"""The truth loop end to end: the real kube-scheduler binds through the extender, kubelet's
own device manager (tests/e2e/kubeletdm) admits the pods through a device plugin, and
``headroom agent`` reads kubelet's own pod-resources server and reports what each pod
holds. The ledger keeps granted and received side by side and bills what was received.

- A node running a stand-in for NVIDIA's stock plugin (time-slicing replicas, a
  grant-blind choice: tests/e2e/stock_plugin.py) puts pods on another GPU than granted:
  each such pod is a ``mismatch`` naming both GPUs, and its bill is the memory granted on
  the GPU received, at that GPU's price.
- A node running headroom's plugin gives every pod its grant: receipts equal grants and
  there is no mismatch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from drivers.gpu.simulated import SimulatedDriver
from extender.ledger import chargeback_report, open_ledger
from extender.ledger.charges import cents
from extender.wire.clock import SystemClock

from .headroom_proc import Headroom
from .kubelet_proc import ROOT, Kubelet, Plugin, _stop, wait_for
from .test_device_plugin import harness, kubelet_dir  # noqa: F401 (fixtures)
from .test_scheduling import pod_body, uid_of, wait_bound

pytestmark = pytest.mark.e2e

H = 3600.0


@dataclass
class Proc:
    """A Python child (the agent, the stand-in plugin) logging to the test's tmp_path."""

    args: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        out = open(self.log, "wb")  # noqa: SIM115
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, *self.args], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT
        )

    def stop(self) -> None:
        _stop(self.proc)


def agent(headroom: Headroom, node: str, spec: str, kubelet: Kubelet, logs: Path) -> Proc:
    """``headroom agent`` for the node: same simulated GPUs (seed, node) as the plugin's."""
    args = ["-m", "extender.cli", "agent", "--driver", "simulated", "--simulated-gpus", spec]
    args += ["--seed", "1", "--node", node, "--extender", headroom.url, "--interval", "1"]
    args += ["--token-file", str(headroom.workdir / "agent-token"), "--metrics-port", "0"]
    args += ["--pod-resources-socket", str(kubelet.pod_resources), "--log-level", "debug"]
    return Proc(args, logs / f"agent-{node}.log")


def received_rows(headroom: Headroom, uids: list[str]) -> dict[str, dict[str, Any]]:
    """Each pod's one allocation, once the agent's report has settled all of them."""
    rows: dict[str, dict[str, Any]] = {}

    def settled() -> bool:
        rows.clear()
        for uid in uids:
            found = headroom.allocations(pod=uid)
            if len(found) != 1 or found[0]["received"] is None:
                return False
            rows[uid] = found[0]
        return True

    wait_for(settled, "every pod's receipt in the ledger", 60)
    return rows


def mismatches(headroom: Headroom) -> list[dict[str, Any]]:
    r = httpx.get(headroom.url + "/v1/discrepancies", params={"limit": 1000})
    r.raise_for_status()
    return [d for d in r.json()["items"] if d["kind"] == "mismatch"]


def test_stock_plugin_node_mismatches_and_bills_what_was_received(
    harness: Path,  # noqa: F811
    kubelet_dir: Path,  # noqa: F811
    e2e_cluster: Any,
    k8s_client: k8s.ApiClient,
    kube_scheduler: Any,
    make_node: Any,
    namespace: str,
    tmp_path: Path,
) -> None:
    core: Any = k8s.CoreV1Api(k8s_client)
    spec = "1xA10G:24Gi,1xA10G:12Gi"  # two sizes: the GPU received changes the price
    big, small = SimulatedDriver(spec, seed=1, node="truth-stock").gpu_uuids
    node = make_node("truth-stock", gpus=8, capacity_type="on-demand")  # 2 GPUs x 4 replicas
    headroom = Headroom(tmp_path, e2e_cluster.kubeconfig)
    kubelet = Kubelet(
        harness, kubelet_dir / "device-plugins", e2e_cluster.kubeconfig, node, tmp_path
    )
    stock = Proc(
        [
            *("-m", "tests.e2e.stock_plugin", "--socket-dir", str(kubelet.socket_dir)),
            *("--gpus", f"{big},{small}", "--replicas", "4"),
        ],
        tmp_path / "stock-plugin.log",
    )
    headroom.start()
    reporter = agent(headroom, node, spec, kubelet, tmp_path)
    try:
        headroom.agent(node, spec)  # the GPUs are known before the first pod
        kubelet.start()
        stock.start()
        reporter.start()
        kube_scheduler(headroom.url)
        uids = []
        for name in ("a", "b", "c"):  # 3 x 10 GiB: the 12 GiB GPU holds one grant at most
            core.create_namespaced_pod(namespace, pod_body(name, "10Gi"))
            uids.append(uid_of(wait_bound(core, namespace, name)))
            assert kubelet.admission(f"{namespace}/{name}")["admitted"]
        rows = received_rows(headroom, uids)
        granted = {uid: row["gpu_uuid"] for uid, row in rows.items()}
        moved = sorted(uid for uid, gpu in granted.items() if gpu != small)
        assert len(moved) >= 2, granted  # the stand-in put all three on the small GPU

        for uid, row in rows.items():
            got = row["received"]
            assert got["gpu_uuid"] == small and got["devices"].startswith(small + "::"), row
            assert got["matches_grant"] == (uid not in moved)
            assert got["memory_mib"] == row["memory_mib"] == 10240
            # the memory granted, on the GPU received, at that GPU's price: 10 of 12 GiB
            # where 10 of 24 GiB was granted: twice the grant's price (to the 28 digits
            # of Decimal's context: 10/12 and 2 x 10/24 round apart in the last one)
            want = Decimal(row["price_per_hour"]) * (2 if uid in moved else 1)
            assert abs(Decimal(got["price_per_hour"]) - want) < Decimal("1e-20"), row

        found = mismatches(headroom)
        assert sorted(d["pod_uid"] for d in found) == moved
        for d in found:
            assert d["gpu_uuid"] == big
            assert d["detail"].startswith(f"granted {big} (10240 MiB), received {small} (")

        # the bill (the audit API's chargeback, priced at a fixed hour) follows the receipt
        ledger = open_ledger(str(tmp_path / "ledger.db"), SystemClock())
        try:
            for row in rows.values():
                t = row["decided_at"]
                report = chargeback_report(ledger, t, t + H, "pod", t + H)
                (line,) = [g for g in report.groups if g.key == f"{namespace}/{row['pod_name']}"]
                assert line.cost == cents(Decimal(row["received"]["price_per_hour"])), row
        finally:
            ledger.close()
    finally:
        reporter.stop()
        stock.stop()
        kubelet.stop()
        headroom.stop()


def test_headroom_plugin_node_receives_exactly_its_grants(
    harness: Path,  # noqa: F811
    kubelet_dir: Path,  # noqa: F811
    e2e_cluster: Any,
    k8s_client: k8s.ApiClient,
    kube_scheduler: Any,
    make_node: Any,
    namespace: str,
    tmp_path: Path,
) -> None:
    core: Any = k8s.CoreV1Api(k8s_client)
    spec = "2xA10G:24Gi"
    node = make_node("truth-ours", gpus=4, capacity_type="on-demand")  # 2 GPUs x 2 slots
    headroom = Headroom(tmp_path, e2e_cluster.kubeconfig)
    kubelet = Kubelet(
        harness, kubelet_dir / "device-plugins", e2e_cluster.kubeconfig, node, tmp_path
    )
    plugin = Plugin(kubelet_dir, e2e_cluster.kubeconfig, node, spec, tmp_path)
    headroom.start()
    reporter = agent(headroom, node, spec, kubelet, tmp_path)
    try:
        headroom.agent(node, spec)
        kubelet.start()
        plugin.start()
        reporter.start()
        kube_scheduler(headroom.url)
        uids = []
        # one after another, each admitted before the next is created
        for name, memory in (("c", "20Gi"), ("a", "10Gi"), ("b", "10Gi")):
            core.create_namespaced_pod(namespace, pod_body(name, memory))
            uids.append(uid_of(wait_bound(core, namespace, name)))
            assert kubelet.admission(f"{namespace}/{name}")["admitted"]
        rows = received_rows(headroom, uids)
        for row in rows.values():
            got = row["received"]
            assert got["matches_grant"] and got["gpu_uuid"] == row["gpu_uuid"], row
            assert (got["memory_mib"], got["price_per_hour"]) == (
                row["memory_mib"],
                row["price_per_hour"],
            )
            assert got["devices"].startswith(row["gpu_uuid"] + "::")
        assert mismatches(headroom) == []
    finally:
        reporter.stop()
        plugin.stop()
        kubelet.stop()
        headroom.stop()
