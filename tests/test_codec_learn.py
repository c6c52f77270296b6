"""Node names are read ahead of the scheduler's lists: a reported node's name is interned
when its report is accepted, and its id told to the inventory's columns, so the first
filter after a start finds it known and its row by id."""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import numpy as np
import pytest

from extender.codec.namebytes import Fingerprint, NameIndex
from extender.codec.namelists import ArgsDecoder, NameList
from extender.scoring.model import GpuView, NodeView
from extender.state.columns import NodeColumns
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
        assert ext.built.service.inventory.columns()._wire == {"gpu-1": 0}  # its id told
        body = ext.post("filter", ext.schedule_args(gpu_pod("p", memory="4Gi"), ["gpu-1"]))
        assert body.json()["NodeNames"] == ["gpu-1"]
        assert index.count == 1  # the list's name was the learned one


def test_learn_gives_the_id_and_keeps_the_reported_string_itself() -> None:
    """The pool holds the very string the report carried (the inventory's key for the
    node), so a look-up there by a list's strings finds it by identity."""
    index = NameIndex()
    reported = "".join(["gpu-", "7"])  # a string object of its own
    wire_id = index.learn(reported)
    assert wire_id == 0 and index.pool()[0] is reported
    assert index.learn("gpu-7") == 0  # known: the same id, nothing added
    assert index.learn('odd"name') is None and index.learn("") is None
    assert index.count == 1


def test_a_list_read_into_ids_has_the_fingerprint_of_its_bytes() -> None:
    """``fingerprint_of`` sums the hashes names got when added; it must be what
    ``fingerprint`` reads from the list's bytes, in any order and layout."""
    index = NameIndex()
    names = [f"ip-10-0-{i}.ec2.internal" for i in range(300)] + ["n\u00e9-1", "x" * 253]
    for name in names[::3]:
        index.learn(name)
    go = msgspec.json.encode(names)
    read = index.read_ids(go)
    assert read is not None
    assert index.fingerprint_of(read[0]) == index.fingerprint(go)
    spaced = b'[ "' + b'" ,\n "'.join(n.encode() for n in names[::-1]) + b'" ]'
    again = index.read_ids(spaced)
    assert again is not None and index.fingerprint_of(again[0]) == index.fingerprint(go)
    assert index.fingerprint_of(read[0][:-1]) != index.fingerprint(go)


def test_the_first_list_is_not_fingerprinted_and_its_permutations_are_still_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no list kept, reading a list fingerprints nothing: not its bytes (it is read
    into ids anyway), nor its ids, whose hashes are cold in memory in the first filter
    after a start. A list of other bytes makes the first's fingerprint from its ids, and
    a permutation of it is still known as it; its bytes again need nothing."""
    index = NameIndex()
    dec = ArgsDecoder(index=index)
    names = [f"node-{i:05d}" for i in range(500)]
    for name in names:
        index.learn(name)
    hashed: list[bytes] = []
    summed: list[int] = []
    real, real_of = index.fingerprint, index.fingerprint_of

    def fingerprint(data: bytes) -> Fingerprint | None:
        hashed.append(data)
        return real(data)

    def fingerprint_of(ids: np.ndarray) -> Fingerprint:
        summed.append(len(ids))
        return real_of(ids)

    monkeypatch.setattr(index, "fingerprint", fingerprint)
    monkeypatch.setattr(index, "fingerprint_of", fingerprint_of)
    body = msgspec.json.encode(names)
    first = dec.names(body)
    assert first is not None and list(first) == names and not hashed and not summed
    assert dec.names(body) is first and not hashed and not summed
    shuffled = random.Random(3).sample(names, len(names))
    assert dec.names(msgspec.json.encode(shuffled)) is first
    assert len(hashed) == 1 and summed == [500]
    other = dec.names(msgspec.json.encode(names[:-1]))
    assert other is not None and other is not first and list(other) == names[:-1]
    assert len(hashed) == 2 and summed == [500]  # the first is fingerprinted once


def test_a_first_list_gone_before_another_comes_is_not_fingerprinted() -> None:
    """The first list's fingerprint waits for a list of other bytes; if the index
    started over meanwhile its ids are void (past the new index's end, here), and it is
    not made from them."""
    index = NameIndex()
    dec = ArgsDecoder(index=index)
    names = [f"node-{i:05d}" for i in range(2000)]
    for name in names:
        index.learn(name)
    first = dec.names(msgspec.json.encode(names))
    assert first is not None and first.ids is not None
    index.clear()  # a new token: ids read before mean nothing now
    shuffled = random.Random(5).sample(names, len(names))
    again = dec.names(msgspec.json.encode(shuffled))
    assert again is not None and again is not first and list(again) == shuffled


def _view(name: str) -> NodeView:
    return NodeView(name, (GpuView(f"{name}-g0", 0, "A10G", 24_000, 0),))


def test_rows_found_by_wire_id_are_the_rows_found_by_name() -> None:
    """Rows by the decoder's ids (told at report intake) stay what a look-up by name
    gives as rows come, go and are reused, for ids never told, and once the decoder's
    index starts over (another token)."""
    cols, index = NodeColumns(), NameIndex()
    names = [f"n-{i}" for i in range(40)]

    def check(listed: list[str]) -> None:
        read = index.read_ids(msgspec.json.encode(listed))
        assert read is not None
        by_id = cols.rows(NameList.of_ids(read[0], index, ("k", len(listed))))
        by_name = cols.rows(list(listed))
        assert by_id.tolist() == by_name.tolist()

    for i, name in enumerate(names[:30]):
        cols.write(_view(name), 1.0, True, i)
        wire_id = index.learn(name)
        assert wire_id is not None
        cols.name_known(name, index.token, wire_id)
    listed = [*names[::-1], "never-reported"]
    check(listed)
    for name in names[:5]:
        cols.drop(name)
    check(listed)
    for i, name in enumerate(names[30:]):  # reuse the dropped rows: told, then written
        wire_id = index.learn(name)
        assert wire_id is not None
        cols.name_known(name, index.token, wire_id)
        cols.write(_view(name), 1.0, True, 40 + i)
    check(listed)
    cols.write(_view("untold"), 1.0, True, 99)  # a row whose id was never told
    check(["untold", *names])
    index.clear()  # ids start again: the rows told before are void
    check(listed)
    wire_id = index.learn(names[7])
    assert wire_id is not None
    cols.name_known(names[7], index.token, wire_id)
    check(listed)


def _by_name(index: NameIndex, names: list[str]) -> list[int]:
    return [index._ids[n.encode()] for n in names]


def test_a_list_of_learned_names_is_read_by_hash_as_by_name() -> None:
    """Names learned at report intake are found by their hashes (``codec.learned``),
    checked byte for byte: the ids are those a look-up by name gives, whatever the
    names' lengths; a list with a name not learned is read by name."""
    index = NameIndex()
    rng = random.Random(5)
    names = [f"n{i}" for i in range(10)] + ["x" * 253, "gpu-\u00e9\u00e8-1", "a" * 8, "b" * 16]
    names += [f"ip-10-0-{i // 250}-{i % 250}.eu-west-1.compute.internal" for i in range(1500)]
    for name in rng.sample(names, len(names)):
        index.learn(name)
    listed = rng.sample(names, 700) + names[:3]  # a name twice too
    data = msgspec.json.encode(listed)
    known = index._known_ids(data)
    assert known is not None and known.tolist() == _by_name(index, listed)
    read = index.read_ids(data)
    assert read is not None and read[0].tolist() == _by_name(index, listed)
    unlearned = msgspec.json.encode([*listed[:50], "not-learned"])
    assert index._known_ids(unlearned) is None
    read = index.read_ids(unlearned)
    assert read is not None and [read[1][i] for i in read[0]] == [*listed[:50], "not-learned"]
    spaced = b'[ "' + b'", "'.join(n.encode() for n in listed) + b'" ]'
    assert index._known_ids(spaced) is None  # not as Go writes it: read by name


def test_names_whose_hashes_collide_are_told_apart_by_their_bytes() -> None:
    """With the multipliers zeroed every name has one hash: a list is then
    found by hash only where the bytes agree, and otherwise read by name, correctly."""
    index = NameIndex()
    index._learned._mult[:] = 0  # every name hashes to 0: one run of slots
    names = [f"node-{i:03d}" for i in range(300)]
    for name in names:
        index.learn(name)
    for listed in ([names[0]], names[::-1], random.Random(2).sample(names, 50)):
        data = msgspec.json.encode(listed)
        found = index._known_ids(data)
        assert found is None or found.tolist() == _by_name(index, listed)
        read = index.read_ids(data)
        assert read is not None and read[0].tolist() == _by_name(index, listed)
    assert index._known_ids(msgspec.json.encode(names[1:3])) is None  # bytes disagree
