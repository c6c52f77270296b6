"""Nodes mode: full Node objects are recognised without decoding each again, and never
mistaken for one another; a changed node's new facts are always applied."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import msgspec
import pytest

from extender.codec.nodecache import HEAD, NodeObjectCache, identifying_head
from extender.state.nodefacts import NodeFacts
from extender.wire.protocol import RawNodeList, args_decoder

NODE = json.loads((Path(__file__).parent / "fixtures/node_g5_12xlarge.json").read_text())


def node(name: str, rv: str | None = "100", capacity: str = "spot", **extra: object) -> dict:
    n = copy.deepcopy(NODE)
    n["metadata"]["name"] = name
    n["metadata"]["labels"]["karpenter.sh/capacity-type"] = capacity
    if rv is None:
        del n["metadata"]["resourceVersion"]
    else:
        n["metadata"]["resourceVersion"] = rv
    n["metadata"].update(extra)
    return n


def raws(*nodes: dict) -> RawNodeList:
    """The items exactly as the server gets them: a Go-ordered NodeList in the body."""
    body = msgspec.json.encode(
        {"Pod": None, "Nodes": {"metadata": {}, "items": list(nodes)}, "NodeNames": None}
    )
    args = args_decoder.decode(body)
    assert args.Nodes is not None
    return args.Nodes


class Recorder:
    def __init__(self) -> None:
        self.applied: list[NodeFacts] = []

    def __call__(self, facts: NodeFacts) -> None:
        self.applied.append(facts)


def test_unchanged_nodes_are_recognised_by_their_head() -> None:
    seen = Recorder()
    cache = NodeObjectCache(seen)
    items = [node(f"n{i}") for i in range(3)]
    assert cache.names(raws(*items)) == ["n0", "n1", "n2"]
    assert [f.capacity_type for f in seen.applied] == ["spot"] * 3
    assert all(isinstance(k, bytes) and len(k) == HEAD for k in cache._entries)
    assert cache.names(raws(*reversed(items))) == ["n2", "n1", "n0"]
    assert len(seen.applied) == 3  # nothing decoded or applied again


def test_a_new_resource_version_brings_the_new_facts() -> None:
    seen = Recorder()
    cache = NodeObjectCache(seen)
    cache.names(raws(node("n0", rv="100", capacity="spot")))
    cache.names(raws(node("n0", rv="101", capacity="on-demand")))
    cache.names(raws(node("n0", rv="102", capacity="spot")))  # back again: seen again
    assert [f.capacity_type for f in seen.applied] == ["spot", "on-demand", "spot"]


def test_without_resource_version_the_whole_object_is_the_key() -> None:
    seen = Recorder()
    cache = NodeObjectCache(seen)
    cache.names(raws(node("n0", rv=None, capacity="spot")))
    cache.names(raws(node("n0", rv=None, capacity="on-demand")))
    cache.names(raws(node("n0", rv=None, capacity="on-demand")))
    assert [f.capacity_type for f in seen.applied] == ["spot", "on-demand"]
    assert all(isinstance(k, int) for k in cache._entries)


def _head(obj: dict) -> bytes:
    return msgspec.json.encode(obj)[:HEAD]


@pytest.mark.parametrize(
    ("obj", "name", "rv", "expected"),
    [
        (
            {"kind": "Node", "metadata": {"name": "a", "uid": "u", "resourceVersion": "7"}},
            "a",
            "7",
            True,
        ),
        # only Go's order (name before resourceVersion) takes the shortcut
        ({"metadata": {"resourceVersion": "7", "name": "a"}}, "a", "7", False),
        # the version is a label's, not the node's: metadata has none
        ({"metadata": {"name": "a", "labels": {"resourceVersion": "7"}}}, "a", "", False),
        # a nested value before the version: not a flat head
        (
            {"metadata": {"name": "a", "labels": {"x": "y"}, "resourceVersion": "7"}},
            "a",
            "7",
            False,
        ),
        # the name is inside something nested, not metadata's own
        ({"metadata": {"labels": {"name": "a"}, "resourceVersion": "7"}}, "", "7", False),
        # metadata not first among the objects
        ({"spec": {"x": 1}, "metadata": {"name": "a", "resourceVersion": "7"}}, "a", "7", False),
        # the version past the head
        ({"metadata": {"name": "a" * 600, "resourceVersion": "7"}}, "a" * 600, "7", False),
    ],
)
def test_identifying_head(obj: dict, name: str, rv: str, expected: bool) -> None:
    assert identifying_head(_head(obj), name, rv) is expected


def test_pretty_printed_json_only_loses_the_shortcut() -> None:
    data = json.dumps({"metadata": {"name": "a", "resourceVersion": "7"}}, indent=2).encode()
    assert not identifying_head(data[:HEAD], "a", "7")
    seen = Recorder()
    cache = NodeObjectCache(seen)
    assert cache.names(RawNodeList([msgspec.Raw(data)])) == ["a"]
    assert cache.names(RawNodeList([msgspec.Raw(data)])) == ["a"] and len(seen.applied) == 1


def test_a_node_without_a_name_is_refused_before_anything_is_applied() -> None:
    seen = Recorder()
    cache = NodeObjectCache(seen)
    nameless = node("x")
    nameless["metadata"]["name"] = ""
    with pytest.raises(msgspec.ValidationError, match=r"items\[1\] has no metadata.name"):
        cache.names(raws(node("n0"), nameless))
    assert seen.applied == []


def test_the_same_objects_again_give_the_same_list_and_apply_nothing() -> None:
    seen = Recorder()
    cache = NodeObjectCache(seen)
    a, b = node("a"), node("b", capacity="on-demand")
    first = cache.names(raws(a, b))
    assert cache.names(raws(a, b)) is first  # the plan cache then knows it by identity
    assert len(seen.applied) == 2
    b2 = node("b", rv="101", capacity="spot")
    assert cache.names(raws(a, b2)) == ["a", "b"]
    assert seen.applied[-1].capacity_type == "spot"
    again = cache.names(raws(a, b))  # b's older object: its facts are applied again
    assert again == ["a", "b"]
    assert seen.applied[-1].capacity_type == "on-demand" and len(seen.applied) == 4
    # filter's list and prioritize's (the ones that passed) alternate: both are kept
    passed = cache.names(raws(b))
    assert cache.names(raws(a, b)) is again and cache.names(raws(b)) is passed
    assert len(seen.applied) == 4
