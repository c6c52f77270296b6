"""Fault (e): the agent's clock is wrong. Staleness must follow the extender's own receive
clock: a report stamped far in the past is fresh when it arrives, and one stamped far
in the future does not keep a silent node alive."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from drivers.agent.loop import build_report
from tests.support import Extender, gpu_pod, running_extender

STALE_AFTER = 5.0
YEAR = 365 * 24 * 3600.0


def skewed_report(ext: Extender, node: str, skew_s: float) -> dict[str, object]:
    driver = ext.drivers[node]
    rep = build_report(driver, node, driver.attribute, ext.clock, labels=ext.labels[node])
    rep.sampled_at = ext.clock.now() + skew_s
    r = ext.client.post("/v1/reports", content=msgspec.json.encode(rep))
    assert r.status_code == 200, r.text
    body: dict[str, object] = r.json()
    return body


@pytest.mark.parametrize("skew_s", [-YEAR, -3600.0, 3600.0, YEAR])
def test_staleness_uses_the_receive_clock(tmp_path: Path, skew_s: float) -> None:
    with running_extender(tmp_path, stale_after=STALE_AFTER) as ext:
        ext.add_node("skewed")
        args = ext.schedule_args(gpu_pod("p", memory="4Gi"), ["skewed"])
        ext.clock.advance(STALE_AFTER + 1)
        reply = skewed_report(ext, "skewed", skew_s)
        # stamped with the extender's time, whatever the agent claimed
        assert reply["received_at"] == ext.clock.now()
        assert ext.built.service.inventory.received_at("skewed") == ext.clock.now()
        assert ext.post("filter", args).json()["NodeNames"] == ["skewed"]

        ext.clock.advance(STALE_AFTER + 1)  # then silence: stale, even if stamped in 2027
        failed = ext.post("filter", args).json()["FailedAndUnresolvableNodes"]
        assert "stale after" in failed["skewed"]
