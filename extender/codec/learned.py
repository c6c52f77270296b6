"""The names agents reported, found by hash, for the first list after a start.

``NameIndex`` reads a list it has not seen into ids by splitting it and looking each
name up in a dict. After a start, thousands of reports have passed through memory
since the names were learned, and that dict, and the names' bytes, are cold: a dict
look-up per name was most of the first filter's read of its list. Here the learned
names are kept in two compact arrays instead: an open-addressed table (one 64-bit entry
per slot: 32 bits of the name's hash, then its id) and the names' bytes as 8-byte words,
zero-padded, against which every name found by hash is checked word for word. The list's
side is one pass over the list's bytes (``golist.c``). A hash that collides, or a
name not learned, gives no answer here, and the dict reads that list: the hash only has
to spread names over slots (random odd multipliers per process, so no set of names
crowds one run of slots on purpose), never to tell them apart.

Filled one name at a time at report intake (``add``), never on a filter.
"""

from __future__ import annotations

import numpy as np

from extender.codec import golist  # compiled from golist.c when the package is built

WORDS = 32  # 8-byte words of the longest name (253 bytes)
EMPTY = -1  # a slot no name holds
_TAG = 0xFFFFFFFF00000000  # an entry's 32 bits of hash (the low 32: its id)


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
        hashed = golist.learned_hash(data, self._mult)
        self._end = end
        self.count += 1
        if 2 * self.count > len(self._table):  # doubled and refilled
            held = self._table[self._table != EMPTY]
            self._table = np.full(max(1024, 2 * len(self._table)), EMPTY, np.int64)
            for entry in held.tolist():
                self._place(entry)
        tag = hashed & _TAG  # the hash's top 32 bits, then the id, as a signed 64-bit entry
        self._place((tag - (1 << 64) if tag >> 63 else tag) | wire_id)

    def _place(self, entry: int) -> None:
        width = len(self._table)
        slot = (entry % 2**64) >> (65 - width.bit_length())
        while self._table[slot] != EMPTY:
            slot = (slot + 1) % width
        self._table[slot] = entry

    def find(self, data: bytes) -> np.ndarray | None:
        """The ids of a list as Go writes it (``["a","b"]``) whose every name was learned,
        each found by its hash and checked word for word against the learned bytes; None
        for any other list (``golist.c``: one pass over the body)."""
        if not self.count:
            return None
        ids = np.empty(len(data) // 4, np.int64)
        table, spot, heap = self._table, self._spot, self._heap  # made here, contiguous
        found = golist.learned(data, self._mult, table, spot, heap, self._end, ids)
        return None if found < 0 else ids[:found]
