"""The names agents reported, found by hash, for the first list after a start.

``NameIndex`` reads a list it has not seen into ids by splitting it and looking each
name up in a dict. After a start, thousands of reports have passed through memory
since the names were learned, and that dict, and the names' bytes, are cold: a dict
look-up per name was most of the first filter's read of its list. Here the learned
names are kept in two compact arrays instead: an open-addressed table (one 64-bit entry
per slot: 32 bits of the name's hash, then its id) and the names' bytes as 8-byte words,
zero-padded, against which every name found by hash is checked word for word. The list's
side is a few whole-array operations per 8 bytes of name. A hash that collides, or a
name not learned, gives no answer here, and the dict reads that list: the hash only has
to spread names over slots (random odd multipliers per process, so no set of names
crowds one run of slots on purpose), never to tell them apart.

Filled one name at a time at report intake (``add``), never on a filter.
"""

from __future__ import annotations

import numpy as np

WORDS = 32  # 8-byte words of the longest name (253 bytes)
EMPTY = -1  # a slot no name holds
MAX_PROBES = 64  # longer runs than this: the list is read by name
_LOW = np.int64(0xFFFFFFFF)  # an entry's id
_HIGH = ~_LOW  # an entry's 32 bits of hash
_TAG = np.uint64(0xFFFFFFFF00000000)


class LearnedNames:
    def __init__(self, rng: np.random.Generator) -> None:
        # per word a multiplier, then the length's, then the final mix's; all odd
        self._mult = rng.integers(0, 2**64, WORDS + 2, np.uint64) | np.uint64(1)
        self._table = np.zeros(0, np.int64)  # at most half full; slot = top hash bits
        # per id (-1: not learned) its first heap word and its length in bytes
        self._spot = np.full((2, 0), -1, np.int64)
        self._heap = np.zeros(1024, np.uint64)  # each name's words, zero-padded
        self._end = 0  # heap words used
        self.count = 0

    def hashes(self, words: list[np.ndarray], lengths: np.ndarray) -> np.ndarray:
        """Each name's hash from its words (``words[j]``: every name's j-th word, bytes
        past its end zero) and its length in bytes."""
        h = lengths.astype(np.uint64) * self._mult[WORDS]
        for j, word in enumerate(words):
            h += word * self._mult[j]
        h ^= h >> np.uint64(29)
        h *= self._mult[WORDS + 1]
        return h

    def add(self, wire_id: int, data: bytes) -> None:
        """The name ``data`` (at most ``WORDS`` words) has id ``wire_id``."""
        words = np.frombuffer(data + bytes(-len(data) % 8), "<u8")
        end = self._end + len(words)
        if end > len(self._heap):
            heap = np.zeros(max(2 * len(self._heap), end), np.uint64)
            heap[: self._end] = self._heap[: self._end]
            self._heap = heap
        self._heap[self._end : end] = words
        if wire_id >= self._spot.shape[1]:
            spot = np.full((2, max(1024, 2 * wire_id)), -1, np.int64)
            spot[:, : self._spot.shape[1]] = self._spot
            self._spot = spot
        self._spot[:, wire_id] = self._end, len(data)
        hashed = self.hashes([w.reshape(1) for w in words], np.array([len(data)]))
        self._end = end
        self.count += 1
        if 2 * self.count > len(self._table):  # doubled and refilled
            held = self._table[self._table != EMPTY]
            self._table = np.full(max(1024, 2 * len(self._table)), EMPTY, np.int64)
            for entry in held.tolist():
                self._place(entry)
        self._place(int((hashed & _TAG).view(np.int64)[0]) | wire_id)

    def _place(self, entry: int) -> None:
        width = len(self._table)
        slot = (entry % 2**64) >> (65 - width.bit_length())
        while self._table[slot] != EMPTY:
            slot = (slot + 1) % width
        self._table[slot] = entry

    def find(self, words: list[np.ndarray], lengths: np.ndarray) -> np.ndarray | None:
        """The ids of the names whose j-th 8-byte words (bytes past the name's end zero)
        are ``words[j]``; None unless every one was learned."""
        if not self.count or not len(lengths):
            return None
        ids = self._probe(self.hashes(words, lengths))
        if ids is None or not (self._spot[1, ids] == lengths).all():
            return None
        at, count = self._spot[0, ids], (lengths + 7) // 8
        for j, word in enumerate(words):
            held = self._heap[np.minimum(at + j, self._end - 1)]
            if ((held != word) & (count > j)).any():
                return None  # another name under a learned one's hash
        return ids

    def _probe(self, hashes: np.ndarray) -> np.ndarray | None:
        """The id in the table for each hash, every slot probed at once (a round per
        step of the longest run); None if one is not there."""
        width = len(self._table)
        slot = (hashes >> np.uint64(65 - width.bit_length())).astype(np.int64)
        wanted = (hashes & _TAG).view(np.int64)
        entries = self._table[slot]
        missed = np.flatnonzero(((entries & _HIGH) != wanted) | (entries == EMPTY))
        for _ in range(MAX_PROBES):
            if not missed.size:
                return entries & _LOW
            if (entries[missed] == EMPTY).any():
                return None  # an empty slot before the hash: that name was not learned
            slot[missed] = (slot[missed] + 1) % width
            entries[missed] = self._table[slot[missed]]
            now = entries[missed]
            missed = missed[((now & _HIGH) != wanted[missed]) | (now == EMPTY)]
        return None
