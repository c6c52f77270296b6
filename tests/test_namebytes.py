"""Candidate lists read by their bytes give exactly what decoding them as JSON gives:
the same names (the very same strings every time), or no answer at all, never another."""

from __future__ import annotations

import random

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.codec.namebytes import NAME_MAX, NameIndex
from extender.wire.protocol import NodeName

JSON = msgspec.json.Decoder(list[NodeName] | None)
PLAIN = st.text(
    st.characters(min_codepoint=0x20, blacklist_categories=["Cs"], blacklist_characters='"\\'),
    min_size=1,
    max_size=40,
).filter(lambda s: len(s.encode()) <= NAME_MAX)
ANY_NAME = st.text(min_size=0, max_size=40)


def decoded(data: bytes) -> list[str] | None:
    try:
        return JSON.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def test_a_list_reads_as_its_names_and_a_permutation_as_the_same_ids() -> None:
    index = NameIndex()
    names = [f"ip-192-168-{i // 250}-{i % 250}.us-west-2.compute.internal" for i in range(600)]
    ids, strings = index.read(msgspec.json.encode(names)) or (None, None)
    assert strings == names and ids is not None and sorted(ids.tolist()) == list(range(600))
    shuffled = random.Random(3).sample(names, len(names))
    again = index.read(msgspec.json.encode(shuffled))
    assert again is not None and again[1] == shuffled
    by_name = dict(zip(names, ids.tolist(), strict=True))
    assert again[0].tolist() == [by_name[n] for n in shuffled]
    assert all(
        a is b for a, b in zip(again[1], (strings[by_name[n]] for n in shuffled), strict=True)
    )  # the very same str objects
    assert index.count == 600


@pytest.mark.parametrize("length", [1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 252, NAME_MAX])
def test_every_length_and_alignment(length: int) -> None:
    index = NameIndex()
    for pad in range(9):  # the name starts at each offset within a word
        names = ["x" * pad or "p", "n" * length, ("é" * length)[: length // 2 or 1]]
        data = msgspec.json.encode(names)
        for body in (data, data.replace(b",", b" , "), b" \n" + data + b"\t"):
            assert (index.read(body) or (None, None))[1] == names == decoded(body)
        ids = index.read_ids(data)
        assert ids is not None
        again = index.read_ids(data[::1] + b" ")
        assert again is not None and again[0].tolist() == ids[0].tolist()  # the same ids
        assert index.fingerprint(data) == index.fingerprint(msgspec.json.encode(names[::-1]))


@pytest.mark.parametrize(
    "body",
    [
        b'["a\\"b"]',
        b'["\\u0061"]',
        b'["a\\nb"]',
        b'["tab\there"]',
        b'[""]',
        b'["ok",""]',
        b'["' + b"x" * (NAME_MAX + 1) + b'"]',
        b'"a"',
        b'["a" "b"]',
        b'["a",]',
        b'["a"]x',
        b"null",
        b"[1]",
        b'["a",1]',
        b'["\xff"]',
        b'["a"',
        b"[",
        b'["a",',
    ],
)
def test_anything_but_plain_names_is_left_to_json(body: bytes) -> None:
    index = NameIndex()
    index.read(b'["a","b"]')
    assert index.read(body) is None


@settings(max_examples=300, deadline=None)
@given(names=st.lists(ANY_NAME, max_size=30), spaces=st.booleans())
def test_reads_what_json_decodes_or_nothing(names: list[str], spaces: bool) -> None:
    index = NameIndex()
    index.read(msgspec.json.encode(names[::2]))  # some known already
    # whitespace between the names, never inside one (a name may be "," itself)
    sep = b" ,\n" if spaces else b","
    data = b"[" + sep.join(msgspec.json.encode(n) for n in names) + b"]"
    read = index.read(data)
    if read is not None:
        assert read[1] == decoded(data)
    plain = all(
        n
        and '"' not in n
        and "\\" not in n
        and min(map(ord, n)) >= 0x20
        and len(n.encode()) <= NAME_MAX
        for n in names
    )
    assert (read is not None) == plain


@settings(max_examples=300, deadline=None)
@given(
    names=st.lists(PLAIN, min_size=1, max_size=12),
    at=st.integers(0, 10_000),
    byte=st.integers(0, 255),
)
def test_any_one_byte_change_reads_as_json_decodes_it_or_not_at_all(
    names: list[str], at: int, byte: int
) -> None:
    index = NameIndex()
    data = msgspec.json.encode(names)
    index.read(data)
    changed = bytearray(data)
    changed[at % len(changed)] = byte
    read = index.read(bytes(changed))
    if read is not None:
        assert read[1] == decoded(bytes(changed))


def test_names_whose_hashes_collide_are_told_apart_by_their_bytes() -> None:
    index = NameIndex(weights=np.zeros(32, np.uint64))  # every name of a length collides
    names = [f"node-{i:03d}" for i in range(300)]
    ids, strings = index.read(msgspec.json.encode(names)) or (None, None)
    assert strings == names and ids is not None and len(set(ids.tolist())) == 300
    again = index.read(msgspec.json.encode(names[::-1]))
    assert again is not None and again[1] == names[::-1]
    assert again[0].tolist() == ids.tolist()[::-1]


def test_a_full_index_starts_again_and_says_so() -> None:
    index = NameIndex(capacity_bytes=256)
    first = index.read(msgspec.json.encode([f"name-{i}" for i in range(20)]))
    token = index.token
    other = [f"other-{i}" for i in range(20)]
    read = index.read(msgspec.json.encode(other))
    assert first is not None and read is not None and read[1] == other
    assert index.token is not token and read[0].tolist() == list(range(20))
    assert index.read(msgspec.json.encode(["x" * 200, "y" * 200])) is None  # never fits


def test_a_name_listed_twice_gets_one_id() -> None:
    index = NameIndex()
    read = index.read(b'["a","b","a"]')
    assert read is not None and read[1] == ["a", "b", "a"] and read[0].tolist() == [0, 1, 0]
    assert index.count == 2


def test_lists_read_one_after_another_by_one_index() -> None:
    """The buffers a read parses in are kept for the next: a long list, then short ones,
    then long again, each reads as JSON decodes it (nothing left over from the last)."""
    index = NameIndex()
    rng = random.Random(3)
    pool = [f"node-{i}-{'x' * rng.randrange(0, 30)}" for i in range(400)]
    for size in (400, 3, 1, 0, 250, 2, 400, 17):
        names = rng.sample(pool, size)
        data = msgspec.json.encode(names)
        read = index.read(data)
        assert read is not None and read[1] == names
        assert index.read(data[:-1]) is None  # cut short: not a list this reads


@settings(max_examples=200, deadline=None)
@given(names=st.lists(PLAIN, min_size=1, max_size=30), data=st.data())
def test_a_fingerprint_is_the_names_whatever_their_order(
    names: list[str], data: st.DataObject
) -> None:
    index = NameIndex()
    index.read(msgspec.json.encode(names[::3]))  # some known already
    fingerprint = index.fingerprint(msgspec.json.encode(names))
    shuffled = data.draw(st.permutations(names))
    assert index.fingerprint(msgspec.json.encode(shuffled)) == fingerprint
    other = data.draw(st.lists(PLAIN, min_size=1, max_size=30))
    if sorted(other) != sorted(names):
        assert index.fingerprint(msgspec.json.encode(other)) != fingerprint
    assert index.fingerprint(b'["a",1]') is None


def test_names_that_differ_only_where_a_weighted_sum_is_weak_hash_apart() -> None:
    """Names whose words differ only in their top bytes, the two swapped: a multilinear
    sum of words mod 2^64 (this index's hash before) collided for one pair in 256; a
    keyed mix of each word does not, so neither do lists' fingerprints."""
    index = NameIndex()
    chars = [c for c in range(0x30, 0x7B) if c != ord("\\")]  # plain names only
    pairs = [
        (f"abcdefg{chr(a)}hijklmn{chr(b)}", f"abcdefg{chr(b)}hijklmn{chr(a)}")
        for a in chars
        for b in chars
        if a < b
    ]
    fingerprints = {index.fingerprint(msgspec.json.encode([n])) for pair in pairs for n in pair}
    assert None not in fingerprints and len(fingerprints) == 2 * len(pairs)
