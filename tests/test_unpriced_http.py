"""A node whose instance type has no price, end to end over real HTTP: the grant is
stored unpriced, ``/v1/chargeback`` says ``null`` and ``unpriced`` (never "0"), the
``headroom_unpriced_nodes`` gauge counts it, one warning names the node and the fix,
and ``headroom ledger chargeback`` prints ``unpriced``."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import gpu_pod, running_extender

H = 3600.0


def test_an_unpriced_node_is_unpriced_everywhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="headroom.service")
    with running_extender(tmp_path, policy="binpack") as ext:
        t0 = ext.clock.now()
        ext.add_node("n-odd", "1xA10G:24Gi", instance_type="g99.unlisted")
        ext.add_node("n-ok", "1xA10G:24Gi", instance_type="g5.xlarge")
        for _ in range(3):  # reports keep coming: still one warning
            ext.clock.advance(10)
            ext.report("n-odd")
        ext.post("filter", ext.schedule_args(gpu_pod("p", memory="8Gi"), ["n-odd"]))
        bind = {"PodName": "p", "PodNamespace": "ml", "PodUID": "uid-p", "Node": "n-odd"}
        assert ext.post("bind", bind).json() == {"Error": ""}
        (row,) = ext.built.service.ledger.for_pod("uid-p")
        assert row.grant.price_per_hour is None

        allocation = ext.client.get(f"/v1/allocations/{row.id}").json()
        assert allocation["price_per_hour"] is None
        ext.clock.advance(H)
        ext.built.service.writer.flush()
        params = {"from": str(t0), "to": str(ext.clock.now())}
        body = ext.client.get("/v1/chargeback", params=params).json()
        (group,) = body["groups"]
        assert group["cost"] is None and group["unpriced_gib_hours"] != "0.0000"
        nodes = {n["node"]: n for n in body["nodes"]}
        assert nodes["n-odd"]["cost"] is None and nodes["n-odd"]["unpriced"] is True
        assert nodes["n-ok"]["cost"] not in (None, "0.00")
        assert body["unpriced_nodes"] == ["n-odd"]

        metrics = ext.client.get("/metrics").text
        assert "headroom_unpriced_nodes 1.0" in metrics
    warnings = [r for r in caplog.records if "no GPU price" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].fields["node"] == "n-odd"  # type: ignore[attr-defined]

    window = ["--from", str(t0), "--to", str(t0 + 2 * H)]
    db = ["--db", str(tmp_path / "ledger.db")]
    table = subprocess.run(
        [sys.executable, "-m", "extender.cli", "ledger", "chargeback", *db, *window],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert table.returncode == 0, table.stderr
    odd = [ln for ln in table.stdout.splitlines() if ln.startswith("n-odd")]
    assert odd and "unpriced" in odd[0] and "UNPRICED" in odd[0]
    assert "1 node(s) without a price" in table.stdout
