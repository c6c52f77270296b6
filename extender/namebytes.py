"""Node names known by their bytes: a candidate list read into ids, no new strings made.

In NodeNames mode each filter carries up to 5,000 names, in a new order for every pod
(kube-scheduler's parallel filter workers hand feasible nodes over as they finish). As
Python strings that list cost more than evaluating the pod: decoding 5,000 fresh strings,
then hashing each again to find it in a dict (0.3-0.6 ms: ``bench/names.py``). Here
compiled loops read the JSON array straight from the request body, 8 bytes at a time,
and find each name's id by its bytes; plans then line lists up by id with one array
lookup (``plans``). Between two requests the scheduler's own process runs, so the index
is usually out of cache when a list arrives: the lookups run in passes (every name's
table slot, then every candidate's record and bytes) so that their cache misses overlap
instead of queueing one behind another, and the table and records are kept small.

Names are interned for the process: the same bytes always give the same id and the very
same ``str``. The pool is bounded; when full it is cleared and ids start again, and the
``token`` changes so that ids read before are known to be void. Only plain names (no
escape, no control character: every Kubernetes node name) are read here; anything else
is left to the JSON decoder, which also names what is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec
import numpy as np

from extender.scoring.compiled import kernel, stream, warms

NAME_MAX = 253  # protocol.NodeName: a DNS subdomain
WORDS = (NAME_MAX + 7) // 8
_HASH, _SPAN = 0, 1  # NameIndex._meta's columns: hash bits, word offset << 8 | length
READ, PLAIN_ONLY = 0, 1  # how a read ended: the whole array, or a value it leaves to JSON
Fingerprint = tuple[int, int, int]  # see NameIndex.fingerprint
_QUOTE, _ESCAPE, _COMMA, _OPEN, _CLOSE = (ord(c) for c in '"\\,[]')
_ONES, _HIGHS = np.uint64(0x0101010101010101), np.uint64(0x8080808080808080)
_QUOTES, _ESCAPES, _SPACES = (np.uint64(0x0101010101010101 * c) for c in (0x22, 0x5C, 0x20))
_LETTERS = np.uint64(0x4141414141414141)  # stand-ins for the bytes after a name's end
_XOR, _WEIGHT, _SET = 0, WORDS, 2 * WORDS  # keys: per word, per word, the set's


@kernel
def _space(buf: Any, p: int) -> int:
    while p < len(buf) and buf[p] in (0x20, 0x09, 0x0A, 0x0D):
        p += 1
    return p


@kernel
def _has_zero_byte(w: Any) -> bool:
    return ((w - _ONES) & ~w & _HIGHS) != 0


@kernel
def _fmix(x: Any) -> Any:
    """MurmurHash3's 64-bit finaliser: a bijection in which every input bit flips every
    output bit with probability about one half."""
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    return x ^ (x >> np.uint64(33))


@kernel
def _word_hash(w: Any, j: int, keys: Any) -> Any:
    """Word ``j`` of a name's share of its hash: mixed under a secret key, then weighted.
    (A plain multilinear sum of words is weak exactly where names differ: two names
    whose words differ only in their top bytes collided for one key in 256.)"""
    return _fmix(w ^ keys[_XOR + j]) * keys[_WEIGHT + j]


@kernel
def _finish(h: Any, n: int) -> Any:
    return _fmix(h ^ np.uint64(n))


@kernel
def _set_share(h: Any, keys: Any) -> Any:
    """A name's second share of a list's fingerprint (the first is its hash)."""
    return _fmix(np.uint64(h) ^ keys[_SET])


@kernel
def _word_at(aligned: Any, s: int) -> Any:
    """The 8 bytes from ``s`` as one little-endian word, from two aligned ones."""
    lo = aligned[s >> 3]
    shift = np.uint64(8 * (s & 7))
    if shift == 0:
        return lo
    return (lo >> shift) | (aligned[(s >> 3) + 1] << (np.uint64(64) - shift))


@kernel
def _hash_names(words: Any, meta: Any, ids: Any, keys: Any) -> None:
    for i in ids:
        h = np.uint64(0)
        o, n = meta[i, _SPAN] >> 8, meta[i, _SPAN] & 0xFF
        for j in range((n >> 3) + 1):  # as ``_name`` reads it: to the closing quote's word
            h += _word_hash(words[o + j] if 8 * j < n else np.uint64(0), j, keys)
        meta[i, _HASH] = np.int64(_finish(h, n))


@kernel
def _insert(table: Any, meta: Any, ids: Any) -> None:
    mask = np.uint64(len(table) - 1)
    for i in ids:
        slot = np.uint64(meta[i, _HASH]) & mask
        while table[slot] != 0:
            slot = (slot + np.uint64(1)) & mask
        table[slot] = i + 1


@kernel
def _name(buf: Any, aligned: Any, s: int, keys: Any) -> Any:
    """The plain name that starts at ``s``, 8 bytes at a time: (length, hash), or
    length -1 when it is not a plain name this reads."""
    h = np.uint64(0)
    for j in range(WORDS):
        w = _word_at(aligned, s + 8 * j)
        end = 8
        if _has_zero_byte(w ^ _QUOTES):
            end = 0
            while (w >> np.uint64(8 * end)) & np.uint64(0xFF) != _QUOTE:
                end += 1
        if s + 8 * j + end >= len(buf):
            return -1, np.int64(0)  # no closing quote
        keep = (np.uint64(1) << np.uint64(8 * end)) - np.uint64(1) if end < 8 else ~np.uint64(0)
        w &= keep
        seen = w | (_LETTERS & ~keep)
        if _has_zero_byte(seen ^ _ESCAPES) or ((seen - _SPACES) & ~seen & _HIGHS) != 0:
            return -1, np.int64(0)  # an escape or a control character: JSON decodes it
        h += _word_hash(w, j, keys)  # the word the name ends in too, none of it its own
        if end < 8:
            n = 8 * j + end
            return (n, np.int64(_finish(h, n))) if 0 < n <= NAME_MAX else (-1, np.int64(0))
    return -1, np.int64(0)


@kernel
def _same(aligned: Any, s: int, n: int, words: Any, o: int) -> bool:
    """The name at ``s`` equals the stored one at word ``o`` (of the same length)."""
    full = n >> 3
    for j in range(full):
        if _word_at(aligned, s + 8 * j) != words[o + j]:
            return False
    if n & 7:
        keep = (np.uint64(1) << np.uint64(8 * (n & 7))) - np.uint64(1)
        return (_word_at(aligned, s + 8 * full) & keep) == words[o + full]
    return True


@kernel
def _parse(buf: Any, aligned: Any, keys: Any, starts: Any, lengths: Any, hashes: Any) -> Any:
    """Each string of the JSON array in ``buf``: where it starts, its length and hash;
    (how many, how it ended, the list's fingerprint: see ``NameIndex.fingerprint``).
    ``buf`` is copied into ``aligned`` first (zeros after it), read 8 bytes at a time:
    here rather than by NumPy calls, a dozen of which cost ~25 µs, cold, in the server."""
    stop, sums = len(buf), np.zeros(2, np.uint64)
    padded = aligned.view(np.uint8)
    padded[:stop] = buf
    padded[stop : stop + 16] = 0
    p = _space(buf, 0)
    if p == stop or buf[p] != _OPEN:
        return 0, PLAIN_ONLY, sums
    p = _space(buf, p + 1)
    if p < stop and buf[p] == _CLOSE:
        return 0, READ if _space(buf, p + 1) == stop else PLAIN_ONLY, sums
    k = 0
    while k < len(starts):
        if p == stop or buf[p] != _QUOTE:
            return k, PLAIN_ONLY, sums
        s = p + 1
        n, h = _name(buf, aligned, s, keys)
        if n < 0:
            return k, PLAIN_ONLY, sums
        starts[k], lengths[k], hashes[k] = s, n, h
        sums[0] += np.uint64(h)
        sums[1] += _set_share(h, keys)
        k += 1
        p = _space(buf, s + n + 1)
        if p < stop and buf[p] == _COMMA:
            p = _space(buf, p + 1)
        elif p < stop and buf[p] == _CLOSE:
            return k, READ if _space(buf, p + 1) == stop else PLAIN_ONLY, sums
        else:
            return k, PLAIN_ONLY, sums
    return k, PLAIN_ONLY, sums  # more values than room: not a list this process reads


@kernel
def _look_up(
    aligned: Any,
    words: Any,
    meta: Any,
    table: Any,
    starts: Any,
    lengths: Any,
    hashes: Any,
    k: int,
    ids: Any,
    count: int,
    used: int,
) -> tuple[int, int]:
    """Each parsed name's id, else ``-1 - start``; how many are not known (and what the
    stream read: returned so that the compiler keeps those loads). In passes: the loads
    of one pass do not wait for each other, so the misses of a cold table overlap; a list
    that touches much of the index first streams all of it in (``stream``: looked up
    cold, 5,000 names were ~200 us of misses; streamed, the ~280 KiB take ~40 us)."""
    streamed = 0
    if 8 * k >= count:
        streamed = stream(table, 16) + stream(meta[:count, _SPAN], 4) + stream(words[:used], 8)
    mask = np.uint64(len(table) - 1)
    for j in range(k):
        ids[j] = table[np.uint64(hashes[j]) & mask] - 1
    unknown = 0
    for j in range(k):
        i = ids[j]
        if not (
            i >= 0
            and meta[i, _HASH] == hashes[j]
            and meta[i, _SPAN] & 0xFF == lengths[j]
            and _same(aligned, starts[j], lengths[j], words, meta[i, _SPAN] >> 8)
        ):
            ids[j] = _probe(aligned, words, meta, table, starts[j], lengths[j], hashes[j])
            unknown += ids[j] < 0
    return unknown, streamed


@kernel
def _probe(aligned: Any, words: Any, meta: Any, table: Any, s: int, n: int, h: Any) -> int:
    mask = np.uint64(len(table) - 1)
    slot = np.uint64(h) & mask
    while table[slot] != 0:
        i = table[slot] - 1
        if (
            meta[i, _HASH] == h
            and meta[i, _SPAN] & 0xFF == n
            and _same(aligned, s, n, words, meta[i, _SPAN] >> 8)
        ):
            return i
        slot = (slot + np.uint64(1)) & mask
    return -1 - s


class _Parsed(NamedTuple):
    """A body parsed into the scratch buffers (valid until the next parse)."""

    aligned: np.ndarray  # its bytes as words
    starts: np.ndarray  # each name's start, length and hash
    lengths: np.ndarray
    hashes: np.ndarray
    names: int  # how many
    sums: np.ndarray  # the fingerprint's two sums


class NameIndex:
    """Name bytes -> id -> the one ``str`` for it. Names are kept as zero-padded words,
    so a name is hashed and compared 8 bytes at a time."""

    def __init__(self, capacity_bytes: int = 64 << 20, weights: np.ndarray | None = None) -> None:
        self.capacity_bytes = capacity_bytes
        # The hash's keys, secret to the process (lists are told apart by fingerprint:
        # nobody outside can aim at a collision). ``weights`` replaces the per-word
        # weights: tests make every name of a length collide with zeros.
        keys = np.random.default_rng().integers(0, 2**64, 2 * WORDS + 1, np.uint64)
        keys[_WEIGHT:_SET] = keys[_WEIGHT:_SET] | np.uint64(1) if weights is None else weights
        self._keys = keys
        self.clear()

    def clear(self) -> None:
        self._words = np.zeros(1 << 14, np.uint64)
        self._used = 0  # words
        self._meta = np.zeros((1024, 2), np.int64)  # small: fewer cache lines to miss
        self._table = np.zeros(4096, np.int32)  # id + 1; 0 empty
        self._strings = np.empty(1024, dtype=object)
        self.count = 0
        self.token = object()  # ids are valid while this is the index's token
        self._aligned = np.zeros(0, np.uint64)  # see _scratch
        self._starts = self._lengths = self._hashes = np.empty(0, np.int64)
        self._last: tuple[bytes, _Parsed | None] | None = None  # see _parsed

    def read(self, data: bytes) -> tuple[np.ndarray, list[str]] | None:
        """The ids and strings of a JSON array of plain names; None for any other value
        (decode it as JSON: that also gives the error). New names are added."""
        found = self.read_ids(data)
        return None if found is None else (found[0], found[1][found[0]].tolist())

    def fingerprint(self, data: bytes) -> Fingerprint | None:
        """What a JSON array of plain names holds, whatever their order: (how many, and
        two sums over the names of keyed 64-bit hashes of their bytes). Two lists of the
        same names in any order have the same; two that differ, another but for a chance
        of about 2^-64 per pair of names. None where ``read`` gives None. No look-up: a
        ``read_ids`` of the same bytes next does not parse them again."""
        parsed = self._parsed(data)
        return None if parsed is None else (parsed.names, int(parsed.sums[0]), int(parsed.sums[1]))

    def read_ids(self, data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        """``read``, with the strings left in the pool they are in: (ids, pool), the
        string of id i being pool[i] (the pool is never written again below its count)."""
        parsed = self._parsed(data)
        if parsed is None:
            return None
        aligned, starts, lengths, hashes, k, _ = parsed
        for _ in range(2):  # a full index is cleared once: these names go in first
            ids = np.empty(k, np.int64)
            unknown, _ = _look_up(
                aligned,
                self._words,
                self._meta,
                self._table,
                starts,
                lengths,
                hashes,
                k,
                ids,
                self.count,
                self._used,
            )
            new = self._new_names(data, ids) if unknown else []
            if new is None:
                return None
            if new and not self._add(new):
                self.clear()
                continue
            return ids, self._strings
        return None

    def _parsed(self, data: bytes) -> _Parsed | None:
        """``data`` parsed into the scratch buffers, once however often asked in a row
        (the last body is held, so its identity cannot pass to another)."""
        if self._last is not None and self._last[0] is data:
            return self._last[1]
        parsed = None
        if np.little_endian:
            buf, aligned, starts, lengths, hashes = self._scratch(data)
            k, how, sums = _parse(buf, aligned, self._keys, starts, lengths, hashes)
            parsed = _Parsed(aligned, starts, lengths, hashes, k, sums) if how == READ else None
        self._last = (data, parsed)
        return parsed

    def _scratch(self, data: bytes) -> tuple[np.ndarray, ...]:
        """The body as bytes, and buffers with room for it as aligned words (``_parse``
        copies it in) and for every value's start, length and hash: kept from one read
        to the next (used from one thread, the event loop), so a read allocates
        nothing new. Whole buffers, not slices: each NumPy call costs, cold."""
        words, room = len(data) // 8 + 3, len(data) // 3 + 1  # each value takes 3+ bytes
        if len(self._aligned) < words or len(self._starts) < room:
            self._aligned = np.zeros(max(words, 2 * len(self._aligned)), np.uint64)
            self._starts, self._lengths, self._hashes = (
                np.empty(max(room, 2 * len(self._starts)), np.int64) for _ in range(3)
            )
        return (
            np.frombuffer(data, np.uint8),
            self._aligned,
            self._starts,
            self._lengths,
            self._hashes,
        )

    def bytes_and_records(self) -> tuple[np.ndarray, np.ndarray]:
        """Every name's bytes (zero-padded to words) and the records that place them (a
        name's record: ``[hash, word offset << 8 | length]``), for writing names without
        making strings (``namejson``). Valid for ids read while the token holds."""
        return self._words.view(np.uint8), self._meta

    def pool(self) -> np.ndarray:
        """The strings by id, as ``read_ids`` gives them (never written below ``count``)."""
        return self._strings

    def ids_of(self, names: Sequence[str]) -> np.ndarray | None:
        """Ids of names already decoded (a Nodes list, a caller's own list); None when a
        name is not plain."""
        found = self.read_ids(msgspec.json.encode(names))  # ids only: no strings made
        return None if found is None else found[0]

    def _new_names(self, data: bytes, ids: np.ndarray) -> list[bytes] | None:
        """The names read as new, each given the id it is about to get (once, however
        often listed) in ``ids``; None if one is not UTF-8."""
        new: dict[bytes, int] = {}
        for k in np.flatnonzero(ids < 0).tolist():
            s = -1 - int(ids[k])
            name = data[s : data.index(b'"', s)]
            ids[k] = new.setdefault(name, self.count + len(new))
        try:
            for name in new:
                name.decode()
        except UnicodeDecodeError:
            return None
        return list(new)

    def _add(self, names: list[bytes]) -> bool:
        """Indexes names under the next ids; False (nothing added) when they would
        overfill the index."""
        padded = [name + bytes(-len(name) % 8) for name in names]
        size = sum(map(len, padded)) // 8
        if 8 * (self._used + size) > self.capacity_bytes:
            return False
        self._reserve(size, len(names))
        ids = np.arange(self.count, self.count + len(names), dtype=np.int64)
        spans = np.fromiter((len(b) // 8 for b in padded), np.int64, len(names))
        offsets = self._used + np.cumsum(spans) - spans
        self._meta[ids, _SPAN] = offsets << 8 | np.fromiter(map(len, names), np.int64, len(names))
        self._words[self._used : self._used + size] = np.frombuffer(b"".join(padded), np.uint64)
        self._strings[ids] = [name.decode() for name in names]
        self._used += size
        self.count += len(names)
        _hash_names(self._words, self._meta, ids, self._keys)
        _insert(self._table, self._meta, ids)
        return True

    def _reserve(self, words: int, names: int) -> None:
        if self._used + words > len(self._words):
            grown = np.zeros(max(2 * len(self._words), self._used + words), np.uint64)
            grown[: self._used] = self._words[: self._used]
            self._words = grown
        if self.count + names > len(self._meta):
            size = max(2 * len(self._meta), self.count + names)
            meta = np.zeros((size, 2), np.int64)
            meta[: self.count] = self._meta[: self.count]
            self._meta = meta
            strings = np.empty(size, dtype=object)
            strings[: self.count] = self._strings[: self.count]
            self._strings = strings
        size = len(self._table)
        while 2 * (self.count + names) > size:  # load factor <= 1/2
            size *= 2
        if size > len(self._table):
            self._table = np.zeros(size, np.int32)
            _insert(self._table, self._meta, np.arange(self.count, dtype=np.int64))


@warms
def _compile() -> None:
    index = NameIndex()
    index.read(b'["warm-up", "b"]')
    index.read(b'["b","warm-up"]')
