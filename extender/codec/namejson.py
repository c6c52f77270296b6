"""Replies that list node names, written as JSON straight from the name index's bytes.

A filter reply lists the nodes that pass and a prioritize reply scores each candidate.
The index holds every name's bytes already, plain (no escape needed: ``namebytes`` reads
only such names), so a reply is those bytes joined between the JSON punctuation
(``bytes.join``, in C), no ``str`` or struct made per name.
"""

from __future__ import annotations

from extender.codec.namebytes import NameIndex
from extender.scoring.batch import Ints


def names_json(index: NameIndex, ids: Ints) -> bytes:
    """``["name",...]`` for these ids (of ``index`` as it is now), as Go's encoder and
    msgspec write a list of strings."""
    if not len(ids):
        return b"[]"
    names = index.name_bytes()
    return b'["' + b'","'.join([names[i] for i in ids.tolist()]) + b'"]'


def scores_json(index: NameIndex, ids: Ints, scores: Ints) -> bytes:
    """``[{"Host":"name","Score":n},...]``: a ``HostPriority`` list, one per id."""
    names = index.name_bytes()
    hosts = map(
        b'{"Host":"%b","Score":%d}'.__mod__,
        zip(map(names.__getitem__, ids.tolist()), scores.tolist(), strict=True),
    )
    return b"[" + b",".join(hosts) + b"]"
