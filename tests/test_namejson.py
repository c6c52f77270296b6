"""Replies written from name ids read exactly as the encoder's would."""

from __future__ import annotations

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.codec.namebytes import NAME_MAX, NameIndex
from extender.codec.namejson import names_json, scores_json
from extender.wire.protocol import HostPriority, encoder

PLAIN = st.text(
    st.characters(min_codepoint=0x20, blacklist_categories=["Cs"], blacklist_characters='"\\'),
    min_size=1,
    max_size=60,
).filter(lambda s: len(s.encode()) <= NAME_MAX)


@settings(max_examples=200, deadline=None)
@given(
    names=st.lists(PLAIN, max_size=20),
    picks=st.lists(st.integers(0, 10_000), max_size=30),
    scores=st.lists(st.integers(-(2**62), 2**62), min_size=30, max_size=30),
)
def test_names_and_scores_are_written_as_the_encoder_writes_them(
    names: list[str], picks: list[int], scores: list[int]
) -> None:
    index = NameIndex()
    index.read(msgspec.json.encode(["known-before", *names[::2]]))  # ids not from zero
    read = index.read(msgspec.json.encode(names))
    assert read is not None
    ids = read[0][[p % len(names) for p in picks]] if names else read[0]
    listed = [str(s) for s in index.pool()[ids]]
    assert names_json(index, ids) == encoder.encode(listed)
    given_scores = np.array(scores[: len(ids)], np.int64)
    hosts = [
        HostPriority(Host=n, Score=s) for n, s in zip(listed, given_scores.tolist(), strict=True)
    ]
    assert scores_json(index, ids, given_scores) == encoder.encode(hosts)


def test_single_digits_and_the_edges_of_a_score() -> None:
    index = NameIndex()
    read = index.read(b'["a","bb"]')
    assert read is not None
    for pair in ([0, 10], [9, -1], [-10, 100]):
        scores = np.array(pair, np.int64)
        assert msgspec.json.decode(scores_json(index, read[0], scores)) == [
            {"Host": "a", "Score": pair[0]},
            {"Host": "bb", "Score": pair[1]},
        ]
