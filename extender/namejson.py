"""Replies that list node names, written as JSON straight from the name index's bytes.

A filter reply lists the nodes that pass and a prioritize reply scores each candidate:
hundreds of names a request. Made as strings and encoded (a ``str`` taken from the pool
per name, a ``HostPriority`` struct per score, then the encoder over them) that cost
0.1-0.2 ms a request, most of it touching objects gone cold since the last one. The
index holds every name's bytes already, plain (no escape needed: ``namebytes`` reads only
such names), so a compiled loop copies them between the JSON punctuation instead.
"""

from __future__ import annotations

import numpy as np

from extender.namebytes import NameIndex
from extender.scoring.batch import Ints
from extender.scoring.compiled import kernel, warms

_SPAN = 1  # NameIndex's record column: word offset << 8 | length
_HOST = np.frombuffer(b'{"Host":"', np.uint8)
_SCORE = np.frombuffer(b'","Score":', np.uint8)
_OPEN, _CLOSE, _COMMA, _QUOTE, _BRACE, _MINUS, _ZERO = (ord(c) for c in '[],"}-0')


@kernel
def _digits(v: int) -> int:
    n = 1 if v >= 0 else 2
    v = abs(v)
    while v >= 10:
        v //= 10
        n += 1
    return n


@kernel
def _put(out, p, src):  # numba infers the types
    for b in range(len(src)):
        out[p + b] = src[b]
    return p + len(src)


@kernel
def _put_name(out, p, name_bytes, meta, i):  # numba infers the types
    start, n = (meta[i, _SPAN] >> 8) * 8, meta[i, _SPAN] & 0xFF
    for b in range(n):
        out[p + b] = name_bytes[start + b]
    return p + n


@kernel
def _put_int(out, p, v):  # numba infers the types
    end = p + _digits(v)
    if v < 0:
        out[p] = _MINUS
        v = -v
    q = end - 1
    while True:
        out[q] = _ZERO + v % 10
        v //= 10
        q -= 1
        if v == 0:
            return end


@kernel
def _sized(name_bytes, meta, ids, per_name):  # numba infers the types
    """The bytes the names take, plus ``per_name`` each, brackets and commas; and the
    first byte of each name, read here so that its cache miss overlaps the others'
    (read as it is copied, one name at a time, the misses of a permuted list queue up:
    0.1 ms for 625 names cold)."""
    size, seen = 1 + len(ids) + len(ids) * per_name, 0
    for i in ids:
        size += meta[i, _SPAN] & 0xFF
        seen += name_bytes[(meta[i, _SPAN] >> 8) * 8]
    return size, seen


@kernel
def _names_json(name_bytes, meta, ids):  # numba infers the types
    size, seen = _sized(name_bytes, meta, ids, 2)
    out = np.empty(max(size, 2), np.uint8)
    out[0], p = _OPEN, 1
    for k in range(len(ids)):
        if k:
            out[p], p = _COMMA, p + 1
        out[p] = _QUOTE
        p = _put_name(out, p + 1, name_bytes, meta, ids[k])
        out[p], p = _QUOTE, p + 1
    out[p] = _CLOSE
    return out, seen  # returned so that the compiler keeps the loads


@kernel
def _scores_json(name_bytes, meta, ids, scores):  # numba infers the types
    size, seen = _sized(name_bytes, meta, ids, len(_HOST) + len(_SCORE) + 1)
    for v in scores:
        size += _digits(v)
    out = np.empty(max(size, 2), np.uint8)
    out[0], p = _OPEN, 1
    for k in range(len(ids)):
        if k:
            out[p], p = _COMMA, p + 1
        p = _put(out, p, _HOST)
        p = _put_name(out, p, name_bytes, meta, ids[k])
        p = _put(out, p, _SCORE)
        p = _put_int(out, p, scores[k])
        out[p], p = _BRACE, p + 1
    out[p] = _CLOSE
    return out, seen  # returned so that the compiler keeps the loads


def names_json(index: NameIndex, ids: Ints) -> bytes:
    """``["name",...]`` for these ids (of ``index`` as it is now), as Go's encoder and
    msgspec write a list of strings."""
    name_bytes, meta = index.bytes_and_records()
    return _names_json(name_bytes, meta, ids)[0].tobytes()


def scores_json(index: NameIndex, ids: Ints, scores: Ints) -> bytes:
    """``[{"Host":"name","Score":n},...]``: a ``HostPriority`` list, one per id."""
    name_bytes, meta = index.bytes_and_records()
    return _scores_json(name_bytes, meta, ids, scores)[0].tobytes()


@warms
def _compile() -> None:
    index = NameIndex()
    found = index.read_ids(b'["warm-up"]')
    assert found is not None
    names_json(index, found[0])
    scores_json(index, found[0], np.zeros(1, np.int64))
