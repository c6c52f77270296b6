"""Candidate lists are decoded once and recognised by their bytes afterwards, with the
same validation and error paths as decoding the whole body in one go."""

from __future__ import annotations

import random
import re
from pathlib import Path

import msgspec
import numpy as np
import pytest

from extender.codec import Codec
from extender.codec.namebytes import NameIndex
from extender.codec.namelists import ArgsDecoder, NameList, name_ids, names_key, same_names
from extender.ledger import open_ledger
from extender.pricing import load_pricebook
from extender.scheduling.binder import InProcessBinder
from extender.scheduling.service import SchedulingService
from extender.scoring import policy_by_name
from extender.state.inventory import Inventory
from extender.wire.clock import ManualClock
from extender.wire.names import picked
from extender.wire.protocol import ExtenderArgs, ExtenderFilterResult, args_decoder, encoder


def body(names: object, pod: object | None = None) -> bytes:
    return msgspec.json.encode({"Pod": pod or {"metadata": {"name": "p"}}, "NodeNames": names})


def test_the_same_list_comes_back_as_the_same_object() -> None:
    dec = ArgsDecoder()
    first = dec.decode(body(["a", "b", "c"]))
    again = dec.decode(body(["a", "b", "c"], pod={"metadata": {"name": "other"}}))
    other = dec.decode(body(["a", "b"]))
    assert isinstance(first.NodeNames, NameList)
    assert again.Pod is not None
    assert again.NodeNames is first.NodeNames and again.Pod.metadata.name == "other"
    assert other.NodeNames == ["a", "b"] and other.NodeNames is not first.NodeNames
    assert names_key(first.NodeNames) != names_key(other.NodeNames)


def test_decodes_exactly_what_the_plain_decoder_does() -> None:
    for raw in (
        body(["n1", "n2"]),
        body(None),
        b'{"Pod": {"metadata": {"name": "p"}}}',
        b'{"NodeNames": ["x"], "Nodes": null, "Unknown": 1}',
    ):
        assert ArgsDecoder().decode(raw) == args_decoder.decode(raw)


@pytest.mark.parametrize(
    ("names", "where"),
    [
        ("n1", "got `str` - at `$.NodeNames`"),
        ([""], "length >= 1 - at `$.NodeNames[0]`"),
        (["ok", "x" * 254], "length <= 253 - at `$.NodeNames[1]`"),
        (["ok", 5], "got `int` - at `$.NodeNames[1]`"),
    ],
)
def test_a_bad_list_names_the_field(names: object, where: str) -> None:
    dec = ArgsDecoder()
    with pytest.raises(msgspec.ValidationError, match=re.escape(where)):
        dec.decode(body(names))
    with pytest.raises(msgspec.ValidationError):  # and stays refused: nothing was cached
        dec.decode(body(names))


def test_capacity_bounds_what_is_kept() -> None:
    dec = ArgsDecoder(capacity=2)
    a = dec.decode(body(["a"])).NodeNames
    dec.decode(body(["b"]))
    assert dec.decode(body(["a"])).NodeNames is a  # a was used last: b goes first
    dec.decode(body(["c"]))
    assert dec.decode(body(["a"])).NodeNames is a
    assert len(dec._lists) == 2


def test_plain_lists_get_a_key_by_content() -> None:
    assert names_key(["a", "b"]) == names_key(["a", "b"]) != names_key(["b", "a"])
    assert same_names(["a"], ["a"]) and not same_names(["a"], ["b"])


def test_lists_alike_at_both_ends_are_told_apart() -> None:
    """Known lists are keyed by both ends of their bytes and compared whole."""
    dec = ArgsDecoder()
    ends = [f"edge-{i:03d}" for i in range(40)]
    one = dec.decode(body([*ends, "middle-a", *ends])).NodeNames
    other = dec.decode(body([*ends, "middle-b", *ends])).NodeNames
    assert one is not None and other is not None
    assert one[40] == "middle-a" and other[40] == "middle-b"
    assert dec.decode(body([*ends, "middle-a", *ends])).NodeNames == one


def test_the_same_pod_bytes_give_the_same_pod_object() -> None:
    """filter and prioritize carry the same Pod: decoded once, known by identity."""
    dec = ArgsDecoder()
    a = dec.decode(body(["a"], pod={"metadata": {"name": "p", "uid": "u"}})).Pod
    b = dec.decode(body(["a", "b"], pod={"metadata": {"name": "p", "uid": "u"}})).Pod
    c = dec.decode(body(["a"], pod={"metadata": {"name": "q", "uid": "u"}})).Pod
    assert a is not None and a is b
    assert c is not None and c is not a and c.metadata.name == "q"


@pytest.mark.parametrize("pod", [{"metadata": {"name": 5}}, "x", 7, {"spec": []}])
def test_a_bad_pod_is_named_as_a_whole_body_decode_names_it(pod: object) -> None:
    raw = body(["a"], pod=pod)
    with pytest.raises(msgspec.ValidationError) as plain:
        args_decoder.decode(raw)
    with pytest.raises(msgspec.ValidationError) as ours:
        ArgsDecoder().decode(raw)
    assert str(ours.value) == str(plain.value)


def test_a_new_pod_object_is_read_anew(tmp_path: Path) -> None:
    """The service reads a Pod's demand once per Pod object: the same uid with another
    ask (a new object) gets its own demand."""
    clock = ManualClock()
    svc = SchedulingService(
        Inventory(load_pricebook()),
        open_ledger(str(tmp_path / "l.db"), clock),
        InProcessBinder(),
        policy_by_name("binpack"),
        clock,
    )
    codec = Codec(svc.node_changed)

    def ask(memory: str) -> ExtenderArgs:
        pod = {
            "metadata": {
                "name": "p",
                "namespace": "t",
                "uid": "u",
                "annotations": {"headroom.dev/gpu-memory": memory},
            },
            "spec": {
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
            },
        }
        return codec.decode_args(body(["n"], pod=pod))

    for memory, mib in (("4Gi", 4096), ("4Gi", 4096), ("8Gi", 8192)):
        svc.filter(ask(memory))
        seen = svc.asks.seen("u")
        assert seen is not None and seen.demand.memory_mib == mib


def test_a_list_read_by_id_gives_its_names_however_it_is_used() -> None:
    """Read lists make their strings on demand; every way of using one gives the names
    in order, lists of the same names are equal (by ids or by strings), and a list read
    before the index was cleared keeps its names and gets ids again."""
    index = NameIndex()
    dec = ArgsDecoder(index=index)
    names = [f"node-{i}" for i in range(50)]
    shuffled = names[::-1]
    a = dec.decode(body(names)).NodeNames
    b = ArgsDecoder(index=index).decode(body(shuffled)).NodeNames  # not dec: a to it
    assert isinstance(a, NameList) and isinstance(b, NameList)
    assert a[3] == "node-3" and b[-1] == "node-0" and b[1:3] == ["node-48", "node-47"]
    assert picked(b, [3, 0, 49]) == ["node-46", "node-49", "node-0"] and picked(b, []) == []
    assert picked(shuffled, [3, 0]) == ["node-46", "node-49"]
    assert len(b) == 50 and list(b) == shuffled and b == shuffled and shuffled == b
    assert a != b and a == NameList(names, "other key") and a != names[:-1]
    c = ArgsDecoder(index=index).decode(body(names)).NodeNames
    assert c is not a and c == a  # the same ids: equal without making strings
    d = ArgsDecoder(index=index).decode(body(names[1:] + names[:1])).NodeNames  # no strings
    assert isinstance(d, NameList)
    index.clear()
    index.read(msgspec.json.encode(["intruder", *shuffled]))  # ids move
    ids = name_ids(index, d)
    assert ids is not None and ids.tolist() == [50 - (i + 1) % 50 for i in range(50)]
    assert d[0] == "node-1" and d[49] == "node-0" and list(d) == names[1:] + names[:1]


def go_body(pod: object, names: object) -> bytes:
    """ExtenderArgs as kube-scheduler's encoding/json writes it in NodeNames mode."""
    return msgspec.json.encode({"Pod": pod, "Nodes": None, "NodeNames": names})


GOOD_POD = {"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": [{"name": "c"}]}}


@pytest.mark.parametrize(
    "data",
    [
        go_body(GOOD_POD, ["n1", "n2"]),
        go_body(GOOD_POD, ["n1", "n2"]) + b"\n",
        go_body(GOOD_POD, None),
        go_body(GOOD_POD, []),
        go_body({"metadata": {"name": "q", "annotations": {"x": "}{]["}}}, ["a\\u0062", "c"]),
        go_body(GOOD_POD, ["n1"])[:-1] + b',"Extra":{"NodeNames":["z"]}}',
        go_body(GOOD_POD, ["n1"])[:-1] + b',"NodeNames":["n2"]}',  # the key twice: the last
    ],
)
def test_go_shaped_bodies_split_by_hand_read_as_the_whole_decode(data: bytes) -> None:
    assert ArgsDecoder().decode(data) == args_decoder.decode(data)


@pytest.mark.parametrize(
    "data",
    [
        go_body({"metadata": {"name": 5}}, ["n1"]),  # a bad Pod
        go_body(GOOD_POD, ["n1", ""]),  # a bad name
        go_body(GOOD_POD, ["n1", 7]),
        go_body(GOOD_POD, ["n1"]) + b"}",  # trailing garbage
        go_body(GOOD_POD, ["n1"])[:-2] + b"}",  # the list not closed
    ],
)
def test_bad_go_shaped_bodies_fail_as_the_whole_decode_does(data: bytes) -> None:
    with pytest.raises((msgspec.DecodeError, msgspec.ValidationError)) as whole:
        args_decoder.decode(data)
    with pytest.raises(type(whole.value), match=re.escape(str(whole.value))):
        ArgsDecoder().decode(data)


def test_the_filters_passing_list_comes_back_without_a_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kube-scheduler sends prioritize the nodes the filter passed, in the reply's order:
    registered by the filter (``expect``), that body is recognised by its bytes and its
    names come with their ids; other names are read as usual."""
    index = NameIndex()
    dec = ArgsDecoder(index=index)
    candidates = dec.decode(body(["n-a", "n-b", "n-c", "n-d"])).NodeNames
    assert isinstance(candidates, NameList)
    passing = candidates.part(np.array([3, 1]))
    assert passing == ["n-d", "n-b"]
    assert passing._index is candidates._index  # a NameList's own slot: copied with the rest
    assert msgspec.json.decode(encoder.encode(ExtenderFilterResult(NodeNames=passing))) == {
        "NodeNames": ["n-d", "n-b"],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    dec.expect(passing)
    reads: list[bytes] = []
    real = index.read_ids

    def read_ids(data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        reads.append(data)
        return real(data)

    monkeypatch.setattr(index, "read_ids", read_ids)
    echoed = dec.decode(body(["n-d", "n-b"])).NodeNames
    assert isinstance(echoed, NameList) and echoed == ["n-d", "n-b"] and not reads
    echoed_ids, passing_ids = name_ids(index, echoed), name_ids(index, passing)
    assert echoed_ids is not None and passing_ids is not None
    assert list(echoed_ids) == list(passing_ids)
    assert dec.decode(body(["n-d", "n-b"])).NodeNames is echoed  # one object, as cached
    assert dec.decode(body(["n-d", "n-a"])).NodeNames == ["n-d", "n-a"] and reads


def test_the_same_names_in_another_order_are_the_list_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """kube-scheduler's parallel filter workers send the same candidates in a new order
    for every pod: such a list is the one kept, order and all, told by its fingerprint
    (no name looked up); a list that differs in one name, or holds one twice, is not."""
    index = NameIndex()
    dec = ArgsDecoder(index=index, capacity=2)
    names = [f"ip-10-0-{i // 200}-{i % 200}.ec2.internal" for i in range(1000)]
    kept = dec.decode(body(names)).NodeNames
    reads: list[bytes] = []
    real = index.read_ids

    def read_ids(data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        reads.append(data)
        return real(data)

    monkeypatch.setattr(index, "read_ids", read_ids)
    rng = random.Random(1)
    for _ in range(3):
        assert dec.decode(body(rng.sample(names, len(names)))).NodeNames is kept
    assert not reads and len(dec._lists) == 1  # the permutations were not kept
    for other in (
        [*names[:-1], "ip-10-0-9-9.ec2.internal"],
        [*names, names[0]],
        names[1:],
        [*names[:-1], names[0]],
    ):
        got = dec.decode(body(other[::-1])).NodeNames
        assert got is not kept and got == other[::-1]
    assert len(reads) == 4
    dec.decode(body(["x"]))
    dec.decode(body(["y"]))  # capacity 2: the kept list is gone, and so is its set
    assert dec.decode(body(names[::-1])).NodeNames == names[::-1] and len(reads) == 7
