"""The names agents reported, found by their keyed hashes, for the first list after a start.

``NameIndex`` reads a list it has not seen into ids by splitting it and looking each
name up in a dict. After a start, thousands of reports have passed through memory
since the names were learned, and that dict, and the names' bytes, are cold: a dict
look-up per name was most of the first filter's read of its list. Here the learned
names are kept in two compact arrays instead: an open-addressed table of their hashes
(the very hashes the list's fingerprint reads, so the list's side costs a few
whole-array operations per 8 bytes of name) and their bytes end to end, 8-byte words,
zero-padded, against which every name found by hash is checked word for word. A hash
that collides or a name not learned gives no answer here; the dict reads that list.

Filled one name at a time at report intake (``add``), never on a filter.
"""

from __future__ import annotations

import numpy as np

EMPTY = -1  # the id of a slot no name holds


class LearnedNames:
    def __init__(self) -> None:
        # at most half full (linear probing stays short); slot = the hash's top bits
        self._hashes = np.zeros(0, np.uint64)
        self._ids = np.zeros(0, np.int64)
        # per id (-1: not learned) its first heap word and its length in bytes
        self._spot = np.full((2, 0), -1, np.int64)
        self._heap = np.zeros(1024, np.uint64)  # each name's words, zero-padded
        self._end = 0  # heap words used
        self.count = 0

    def add(self, wire_id: int, data: bytes, hashed: np.uint64) -> None:
        """The name ``data`` with id ``wire_id`` and hash ``hashed``."""
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
        self._end = end
        self.count += 1
        if 2 * self.count > len(self._ids):  # doubled and refilled
            held = self._ids != EMPTY
            old = zip(self._hashes[held].tolist(), self._ids[held].tolist(), strict=True)
            self._hashes = np.zeros(max(1024, 2 * len(self._ids)), np.uint64)
            self._ids = np.full(len(self._hashes), EMPTY, np.int64)
            for h, i in old:
                self._place(h, i)
        self._place(int(hashed), wire_id)

    def _place(self, hashed: int, wire_id: int) -> None:
        width = len(self._ids)
        slot = hashed >> (65 - width.bit_length())
        while self._ids[slot] != EMPTY:
            slot = (slot + 1) % width
        self._hashes[slot], self._ids[slot] = hashed, wire_id

    def find(
        self, hashes: np.ndarray, words: list[np.ndarray], lengths: np.ndarray
    ) -> np.ndarray | None:
        """The ids of the names with these hashes, whose j-th 8-byte words (bytes past
        the name's end zero) are ``words[j]``; None unless every one is learned."""
        ids = self._probe(hashes) if self.count and len(hashes) else None
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
        step of the longest probe); None if one is not there."""
        width = len(self._ids)
        slot = (hashes >> np.uint64(65 - width.bit_length())).astype(np.int64)
        ids = self._ids[slot]
        missed = np.flatnonzero((self._hashes[slot] != hashes) | (ids == EMPTY))
        while missed.size:
            if (self._ids[slot[missed]] == EMPTY).any():
                return None  # an empty slot before the hash: that name was not learned
            slot[missed] = (slot[missed] + 1) % width
            ids[missed] = self._ids[slot[missed]]
            wrong = self._hashes[slot[missed]] != hashes[missed]
            missed = missed[wrong | (ids[missed] == EMPTY)]
        return ids
