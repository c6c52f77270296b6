"""Node names are read ahead of the scheduler's lists: a reported node's name is interned
when its report is accepted, so the first filter after a start finds it known."""

from __future__ import annotations

from pathlib import Path

import msgspec

from extender.codec.namebytes import NameIndex
from tests.support import gpu_pod, running_extender


def test_a_learned_name_is_read_without_adding_it_again() -> None:
    index = NameIndex()
    index.learn("node-a")
    index.learn("node-a")  # twice: one id
    index.learn('odd"name')  # not plain: left to the lists that carry it
    assert index.count == 1
    read = index.read_ids(msgspec.json.encode(["node-b", "node-a"]))
    assert read is not None
    ids, pool = read
    assert [pool[i] for i in ids] == ["node-b", "node-a"]
    assert ids[1] == 0 and index.count == 2  # node-a kept the id it learned


def test_an_accepted_report_interns_its_node_and_filter_still_answers(tmp_path: Path) -> None:
    with running_extender(tmp_path) as ext:
        ext.add_node("gpu-1", "4xA10G:24Gi")
        index = ext.built.app.state.codec.index
        assert index.count == 1 and index.pool()[0] == "gpu-1"
        body = ext.post("filter", ext.schedule_args(gpu_pod("p", memory="4Gi"), ["gpu-1"]))
        assert body.json()["NodeNames"] == ["gpu-1"]
        assert index.count == 1  # the list's name was the learned one
