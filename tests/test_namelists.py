"""Candidate lists are decoded once and recognised by their bytes afterwards, with the
same validation and error paths as decoding the whole body in one go."""

from __future__ import annotations

import re

import msgspec
import pytest

from extender.namelists import ArgsDecoder, NameList, names_key, same_names
from extender.protocol import args_decoder


def body(names: object, pod: object | None = None) -> bytes:
    return msgspec.json.encode({"Pod": pod or {"metadata": {"name": "p"}}, "NodeNames": names})


def test_the_same_list_comes_back_as_the_same_object() -> None:
    dec = ArgsDecoder()
    first = dec.decode(body(["a", "b", "c"]))
    again = dec.decode(body(["a", "b", "c"], pod={"metadata": {"name": "other"}}))
    other = dec.decode(body(["a", "b"]))
    assert isinstance(first.NodeNames, NameList)
    assert again.NodeNames is first.NodeNames and again.Pod.metadata.name == "other"
    assert other.NodeNames == ["a", "b"] and other.NodeNames is not first.NodeNames
    assert names_key(first.NodeNames) != names_key(other.NodeNames)


def test_decodes_exactly_what_the_plain_decoder_does() -> None:
    for raw in (body(["n1", "n2"]), body(None), b'{"Pod": {"metadata": {"name": "p"}}}',
                b'{"NodeNames": ["x"], "Nodes": null, "Unknown": 1}'):
        assert ArgsDecoder().decode(raw) == args_decoder.decode(raw)


@pytest.mark.parametrize(("names", "where"), [
    ("n1", "got `str` - at `$.NodeNames`"),
    ([""], "length >= 1 - at `$.NodeNames[0]`"),
    (["ok", "x" * 254], "length <= 253 - at `$.NodeNames[1]`"),
    (["ok", 5], "got `int` - at `$.NodeNames[1]`"),
])
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
