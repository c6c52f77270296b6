"""What an operator sees of a running extender, over real HTTP: ``GET /v1/nodes`` and
``headroom top`` (measured, granted, headroom, report age, price per node and GPU), the
verbs' latency histograms, and per-node gauges that come and go with the node."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.serveproc import ServeProc
from tests.support import gpu_pod, running_extender

ROOT = Path(__file__).resolve().parents[1]


def metric(text: str, name: str, **labels: str) -> float | None:
    """One sample's value from the Prometheus text format, or None when absent."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = (
        rf"^{re.escape(name)}(\{{{re.escape(want)}\}})? (\S+)$" if want else rf"^{name} (\S+)$"
    )
    for line in text.splitlines():
        m = re.match(pattern, line)
        if m:
            return float(m.groups()[-1])
    return None


def test_nodes_route_shows_what_was_reported_and_granted(tmp_path: Path) -> None:
    with running_extender(tmp_path, policy="binpack") as ext:
        driver = ext.add_node("n1", "2xA10G:24Gi", instance_type="g5.12xlarge")
        ext.add_node("odd", "1xA10G:24Gi", instance_type="g99.unlisted")
        ext.clock.advance(7)
        ext.post("filter", ext.schedule_args(gpu_pod("p", memory="8Gi"), ["n1"]))
        args = {"PodName": "p", "PodNamespace": "ml", "PodUID": "uid-p", "Node": "n1"}
        assert ext.post("bind", args).json() == {"Error": ""}

        body = ext.client.get("/v1/nodes").json()
        nodes = {n["name"]: n for n in body["items"]}
        assert set(nodes) == {"n1", "odd"}
        n1 = nodes["n1"]
        assert n1["report_age_s"] == 7 and n1["capacity_type"] == "on-demand"
        assert n1["price_per_gpu_hour"] not in (None, "0")
        assert nodes["odd"]["price_per_gpu_hour"] is None  # unpriced, not "0"
        measured = {d.uuid: d for d in driver.sample()}  # what the agent reported
        (granted,) = [g for g in n1["gpus"] if g["granted_mib"]]
        assert granted["granted_mib"] == 8192
        assert {g["uuid"] for g in n1["gpus"]} == set(measured)
        for g in n1["gpus"]:
            assert g["total_mib"] == measured[g["uuid"]].memory_total_mib
            assert g["used_mib"] == measured[g["uuid"]].memory_used_mib
            assert g["headroom_mib"] == max(0, g["total_mib"] - g["committed_mib"])
            assert g["committed_mib"] >= g["granted_mib"]
        assert n1["headroom_mib"] == sum(g["headroom_mib"] for g in n1["gpus"])


def test_metrics_time_each_verb_and_track_nodes(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        before = ext.client.get("/metrics").text
        ext.add_node("n1", "1xA10G:24Gi")
        args = ext.schedule_args(gpu_pod("p", memory="4Gi"), ["n1"])
        ext.post("filter", args)
        ext.post("prioritize", args)
        bind = {"PodName": "p", "PodNamespace": "ml", "PodUID": "uid-p", "Node": "n1"}
        assert ext.post("bind", bind).json() == {"Error": ""}
        after = ext.client.get("/metrics").text
        name = "headroom_extender_request_duration_seconds_count"
        for verb in ("filter", "prioritize", "bind"):
            assert (metric(after, name, verb=verb) or 0) == (
                metric(before, name, verb=verb) or 0
            ) + 1
        headroom = metric(after, "headroom_node_gpu_headroom_bytes", node="n1")
        assert headroom is not None and 0 < headroom < 24 * 2**30
        assert metric(after, "headroom_node_report_age_seconds", node="n1") == 0
        assert metric(after, "headroom_namespace_granted_bytes", namespace="ml") == 4 * 2**30
        assert metric(after, "headroom_namespace_grants", namespace="ml") == 1

        ext.built.service.node_gone("n1", "test")  # the node left the cluster
        gone = ext.client.get("/metrics").text
        assert metric(gone, "headroom_node_gpu_headroom_bytes", node="n1") is None
        assert metric(gone, "headroom_node_report_age_seconds", node="n1") is None


def top(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extender.cli", "top", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_headroom_top_against_a_running_extender(tmp_path: Path) -> None:
    token = tmp_path / "audit-token"
    token.write_text("audit-secret\n")
    serve = ServeProc(tmp_path, str(tmp_path / "h.db"), ["--audit-token-file", str(token)])
    serve.start()
    try:
        serve.report("gpu-1", "2xA10G:24Gi")
        serve.report("gpu-2", "1xA10G:24Gi")
        ok = top("--url", serve.url, "--token-file", str(token))
        assert ok.returncode == 0, ok.stderr
        lines = ok.stdout.splitlines()
        assert lines[0].split()[:4] == ["NODE", "GPU", "MODEL", "TOTAL"]
        assert [ln.split()[0] for ln in lines[2:] if ln.startswith("gpu-")] == ["gpu-1", "gpu-2"]
        assert lines[-1].startswith("2 node(s), 3 GPU(s)")

        refused = top("--url", serve.url)
        assert refused.returncode == 1
        assert (
            refused.stderr.strip()
            == f"headroom top: {serve.url} needs the audit API's token: pass --token-file"
        )
        with httpx.Client() as c:  # the route is the audit API's: same token
            assert c.get(serve.url + "/v1/nodes").status_code == 401
    finally:
        serve.stop()
    dead = top("--url", serve.url)
    assert dead.returncode == 1
    (line,) = dead.stderr.strip().splitlines()
    assert line.startswith(f"headroom top: cannot reach the extender at {serve.url}")
