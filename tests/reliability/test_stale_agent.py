"""Fault (a): an agent goes silent. After --stale-after its node's headroom is unknown,
GPU pods are steered to nodes that still report, with a reason a person can act on, and
the node comes back as soon as its agent reports again. Time is the extender's clock
(a ManualClock here), so nothing sleeps."""

from __future__ import annotations

from pathlib import Path

from tests.support import gpu_pod, running_extender

STALE_AFTER = 5.0


def test_silent_agent_node_is_steered_away_and_recovers(tmp_path: Path) -> None:
    # the filter narrows without deciding, so both nodes pass while both fit
    with running_extender(tmp_path, stale_after=STALE_AFTER, decide=False) as ext:
        ext.add_node("quiet")
        ext.add_node("chatty")
        pod = gpu_pod("p1", memory="4Gi")
        args = ext.schedule_args(pod, ["quiet", "chatty"])
        assert ext.post("filter", args).json()["NodeNames"] == ["quiet", "chatty"]

        ext.clock.advance(STALE_AFTER + 1)  # "quiet" stops reporting; "chatty" keeps on
        ext.report("chatty")
        reply = ext.post("filter", args).json()
        assert reply["NodeNames"] == ["chatty"]
        reason = reply["FailedAndUnresolvableNodes"]["quiet"]
        assert "report is 6s old" in reason and "stale after 5s" in reason
        assert "is the agent running?" in reason
        # the scheduler's own choice of the stale node is refused at bind, with that reason
        bind = {"PodName": "p1", "PodNamespace": "ml", "PodUID": "uid-p1", "Node": "quiet"}
        refused = ext.post("bind", bind).json()["Error"]
        assert "quiet" in refused and "stale" in refused
        assert ext.built.service.inventory.grants_of("uid-p1") == []
        assert ext.built.service.ledger.for_pod("uid-p1") == []

        ext.report("quiet")  # the agent is back
        assert ext.post("filter", args).json()["NodeNames"] == ["quiet", "chatty"]
        assert ext.post("bind", bind).json()["Error"] == ""
        assert [g.node for g in ext.built.service.inventory.grants_of("uid-p1")] == ["quiet"]


def test_prioritize_never_prefers_a_stale_node(tmp_path: Path) -> None:
    # the filter narrows without deciding, so both nodes pass while both fit
    with running_extender(tmp_path, stale_after=STALE_AFTER, decide=False) as ext:
        ext.add_node("quiet")
        ext.add_node("chatty")
        ext.clock.advance(STALE_AFTER + 1)
        ext.report("chatty")
        scores = {
            h["Host"]: h["Score"]
            for h in ext.post(
                "prioritize", ext.schedule_args(gpu_pod("p2", memory="4Gi"), ["quiet", "chatty"])
            ).json()
        }
        assert scores["quiet"] == 0 and scores["chatty"] > 0
