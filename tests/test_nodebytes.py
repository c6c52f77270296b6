"""Nodes mode without parsing the Node JSON again: a Go-shaped body is walked by bytes,
and whatever it accepts, it reads exactly as the whole-body decode does."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.codec.namebytes import NameIndex
from extender.codec.namelists import ArgsDecoder, NameList
from extender.codec.nodebytes import FOUND_ALL, HASHED, MISS, PROBES, ByteIndex, value_end
from extender.codec.nodecache import MAX_NEW, NodeObjectCache, WalkedNodes
from extender.state.nodefacts import NodeFacts
from extender.wire.protocol import ExtenderArgs

NODE = json.loads((Path(__file__).parent / "fixtures/node_g5_12xlarge.json").read_text())
POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
    "spec": {"containers": [{"name": "c"}]},
}


def node(name: str, rv: str = "100", capacity: str = "spot") -> dict[str, Any]:
    """As kube-scheduler encodes a Node from its informer cache: no kind/apiVersion."""
    n = copy.deepcopy(NODE)
    del n["kind"], n["apiVersion"]
    n["metadata"].update(name=name, resourceVersion=rv)
    n["metadata"]["labels"]["karpenter.sh/capacity-type"] = capacity
    return n


def body(nodes: list[dict[str, Any]], pod: Any = POD, newline: bool = True) -> bytes:
    """ExtenderArgs as encoding/json writes it: Go's field order, Encoder's newline."""
    data = msgspec.json.encode(
        {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
    )
    return data + b"\n" if newline else data


class Side:
    """A decoder and the node cache it walks with, as the server pairs them."""

    def __init__(self, walk: bool = True) -> None:
        self.applied: list[NodeFacts] = []
        self.index = NameIndex()  # one for both, as the service shares its own
        self.cache = NodeObjectCache(self.applied.append, index=self.index)
        self.decoder = ArgsDecoder(nodes=self.cache if walk else None, index=self.index)

    def read(self, data: bytes) -> tuple[ExtenderArgs, Sequence[str], list[bytes]]:
        args = self.decoder.decode(data)
        if args.Nodes is None:  # a mutated key: no Nodes at all
            return args, [], []
        return args, self.cache.names(args.Nodes), [bytes(i) for i in args.Nodes.items]


def test_a_go_shaped_body_is_walked_and_reads_like_the_whole_decode() -> None:
    nodes = [node(f"n{i}") for i in range(20)]
    walked, plain = Side(), Side(walk=False)
    for data in (body(nodes), body(nodes[::-1]), body(nodes[5:12], newline=False)):
        args, names, items = walked.read(data)
        want_args, want_names, want_items = plain.read(data)
        assert isinstance(args.Nodes, WalkedNodes)
        assert args.Pod == want_args.Pod and names == want_names and items == want_items
    assert items == [msgspec.json.encode(n) for n in nodes[5:12]]  # echoed byte for byte


def test_walked_lists_come_as_name_ids_whatever_the_index_went_through() -> None:
    """A walked list is read by ids (no strings made): the same names in any order, ids
    that are the index's own, and right again after the index was cleared."""
    side = Side()
    nodes = [node(f"n{i}") for i in range(30)]
    _, names, _ = side.read(body(nodes))
    _, shuffled, _ = side.read(body(nodes[::-1]))
    assert isinstance(shuffled, NameList) and shuffled.ids is not None
    assert list(shuffled) == [f"n{i}" for i in range(29, -1, -1)] and names == shuffled[::-1]
    want = side.index.ids_of([f"n{i}" for i in range(29, -1, -1)])
    assert want is not None and shuffled.ids.tolist() == want.tolist()
    side.index.clear()
    side.index.read(msgspec.json.encode(["other", "n7"]))  # ids move
    _, again, _ = side.read(body(nodes[::2]))
    assert list(again) == [f"n{i}" for i in range(0, 30, 2)]
    assert isinstance(again, NameList) and again.token is side.index.token
    want = side.index.ids_of([f"n{i}" for i in range(0, 30, 2)])
    assert want is not None and again.ids is not None
    assert again.ids.tolist() == want.tolist() and min(want.tolist()) == 2  # after the two
    assert again[4] == "n8" and len(side.applied) == 30  # nothing applied again


def test_changed_and_new_nodes_are_decoded_and_their_facts_applied() -> None:
    side = Side()
    nodes = [node(f"n{i}") for i in range(10)]
    side.read(body(nodes))
    assert len(side.applied) == 10
    changed = [*nodes[:3], node("n3", rv="101", capacity="on-demand"), *nodes[4:], node("n10")]
    args, names, _ = side.read(body(changed))
    assert isinstance(args.Nodes, WalkedNodes)
    assert names == [f"n{i}" for i in range(11)]
    assert [(f.name, f.capacity_type) for f in side.applied[10:]] == [
        ("n3", "on-demand"),
        ("n10", "spot"),
    ]


def test_walked_objects_apply_their_facts_only_when_not_the_ones_applied_last() -> None:
    """The same objects in any order apply nothing (the same list back for the same
    order); a node's new object applies, and its older object again applies again."""
    side = Side()
    nodes = [node(f"n{i}") for i in range(8)]
    _, first, _ = side.read(body(nodes))
    assert len(side.applied) == 8
    args, again, _ = side.read(body(nodes))
    assert isinstance(args.Nodes, WalkedNodes) and again is first
    _, shuffled, _ = side.read(body(nodes[::-1]))
    assert list(shuffled) == [f"n{i}" for i in range(8)][::-1] and len(side.applied) == 8
    newer = [*nodes[:2], node("n2", rv="101", capacity="on-demand"), *nodes[3:]]
    side.read(body(newer[::-1]))
    assert [(f.name, f.capacity_type) for f in side.applied[8:]] == [("n2", "on-demand")]
    side.read(body(nodes[::-1]))  # n2's older object: applied again
    assert [(f.name, f.capacity_type) for f in side.applied[9:]] == [("n2", "spot")]
    side.read(body(nodes))
    side.read(body(nodes[3:] + nodes[:3]))
    assert len(side.applied) == 10


def test_a_walked_list_with_a_nameless_node_is_refused_before_anything_is_applied() -> None:
    side = Side()
    nodes = [node(f"n{i}") for i in range(10)]
    side.read(body(nodes))
    nameless = node("x")
    nameless["metadata"]["name"] = ""
    changed = [*nodes[:3], node("n3", rv="101", capacity="on-demand"), *nodes[4:], nameless]
    args = side.decoder.decode(body(changed))
    assert isinstance(args.Nodes, WalkedNodes)
    with pytest.raises(msgspec.ValidationError, match=r"items\[10\] has no metadata.name"):
        side.cache.names(args.Nodes)
    assert len(side.applied) == 10  # n3's new object not applied either


def test_many_unknown_nodes_are_decoded_whole_once_then_walked() -> None:
    side = Side()
    nodes = [node(f"n{i}") for i in range(MAX_NEW + 10)]
    first, names, _ = side.read(body(nodes))
    assert not isinstance(first.Nodes, WalkedNodes)  # too many new ones: one full decode
    again, names_again, _ = side.read(body(nodes))
    assert isinstance(again.Nodes, WalkedNodes) and names_again == names
    assert len(side.applied) == len(nodes)  # nothing applied twice


def test_bodies_laid_out_otherwise_are_decoded_whole() -> None:
    nodes = [node(f"n{i}") for i in range(3)]
    side = Side()
    side.read(body(nodes))
    other_order = msgspec.json.encode(
        {"Pod": POD, "NodeNames": None, "Nodes": {"metadata": {}, "items": nodes}}
    )
    spaced = json.dumps(
        {"Pod": POD, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
    ).encode()
    for data in (other_order, spaced, body(nodes, pod=None)):
        args, names, _ = side.read(data)
        assert not isinstance(args.Nodes, WalkedNodes) and names == ["n0", "n1", "n2"]


def test_a_known_head_with_broken_json_after_it_is_refused_as_before() -> None:
    side = Side()
    nodes = [node(f"n{i}") for i in range(3)]
    good = body(nodes)
    side.read(good)
    at = good.rindex(b'"nodeInfo"')
    broken = good[:at] + b"{" + good[at:]  # the last node's tail no longer parses
    with pytest.raises(msgspec.DecodeError) as walked:
        side.decoder.decode(broken)
    with pytest.raises(msgspec.DecodeError) as plain:
        Side(walk=False).decoder.decode(broken)
    assert str(walked.value) == str(plain.value)


MUTATIONS = [b'"', b",", b"]", b"}", b"{", b"[", b"\\", b" ", b"x", b"0", b""]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_one_byte_change_reads_exactly_as_the_whole_decode(data: st.DataObject) -> None:
    """Whatever a corrupted or altered body does to the whole-body decode (an error, or
    other names and items), the walk does the same."""
    nodes = [node(f"n{i}") for i in range(4)]
    original = body(nodes)
    at = data.draw(st.integers(0, len(original) - 1))
    new = data.draw(st.sampled_from(MUTATIONS))
    mutated = original[:at] + new + original[at + 1 :]
    walked, plain = Side(), Side(walk=False)
    walked.read(original)
    plain.read(original)
    outcomes: list[tuple[Any, ...]] = []
    for side in (walked, plain):
        try:
            args, names, items = side.read(mutated)
            outcomes.append(("ok", args.Pod, names, items))
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            outcomes.append(("error", type(e).__name__, str(e)))
    assert outcomes[0] == outcomes[1]


def _item(prefix: bytes, n: int) -> bytes:
    return b'{"metadata":{"name":"' + prefix + b'"},"n":' + str(n).encode() + b"}"


def test_items_alike_in_their_hashed_bytes_are_told_apart_by_all_their_bytes() -> None:
    index = ByteIndex()
    shared = b"a" * HASHED  # every item hashes the same: one probe chain
    items = [_item(shared, n) for n in range(PROBES)]
    ids = [index.add(i) for i in items]
    order = [3, 0, PROBES - 1, 7, 3]
    data = b"[" + b",".join(items[k] for k in order) + b"]"
    out_ids, out_starts = np.zeros(8, np.int64), np.zeros(8, np.int64)
    count, stop, why = index.walk(np.frombuffer(data, np.uint8), 1, out_ids, out_starts)
    assert (count, stop, why) == (len(order), len(data), FOUND_ALL)
    assert out_ids[:count].tolist() == [ids[k] for k in order]
    unseen = b"[" + _item(shared, 99) + b"]"
    assert index.walk(np.frombuffer(unseen, np.uint8), 1, out_ids, out_starts) == (0, 1, MISS)


def test_short_items_are_not_indexed() -> None:
    assert ByteIndex().add(b'{"a":1}') is None


@pytest.mark.parametrize(
    ("text", "end"),
    [
        (b'{"a":"}{\\"]"}, tail', 13),
        (b'[1,{"b":[2,3]},"\\\\"],', 20),
        (b'{"a":', -1),
        (b'"a"', -1),
    ],
)
def test_value_end_skips_strings_and_escapes(text: bytes, end: int) -> None:
    assert value_end(np.frombuffer(text, np.uint8), 0) == end
