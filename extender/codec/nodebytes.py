"""Node objects recognised by their exact bytes, at memory speed.

With ``nodeCacheCapable: false`` every filter and prioritize body carries all candidate
Nodes in full: 32 MB at 5,000 nodes. Finding where each item ends is a JSON scan of all
of it (msgspec: ~17 ms, more than the floor's whole request), though nearly every item
is byte for byte an object seen, and validated, before. Here a walk over the ``items``
array looks each item up instead: its first ``HASHED`` bytes name candidates among the
objects seen before (a dict), and a candidate that is byte-for-byte equal and followed
by ``,`` or ``]`` *is* that item -- equal bytes are the same valid JSON with the same
facts. Comparing bytes runs at memory speed (memcmp).

The head only chooses what to compare, so shared heads cost time, never a wrong
answer; at most ``PROBES`` candidates are compared (an item then counts as not seen).
"""

from __future__ import annotations

from typing import Any

import numpy as np

HASHED = 128  # bytes that choose candidates at an item's start: name, uid, resourceVersion
PROBES = 16
CHUNK = 1 << 10  # bytes ``value_end`` scans first (doubling): about a Pod, not the whole body

FOUND_ALL, MISS, FULL = 0, 1, 2  # how a walk stopped: at ']', at an unknown item, out of room
_OPEN, _CLOSE, _QUOTE, _ESCAPE = (ord(c) for c in '{}"\\')
_COMMA, _BRACKET_OPEN, _BRACKET_CLOSE = (ord(c) for c in ",[]")
_POD = b'{"Pod":'  # how Go's encoder starts ExtenderArgs


def value_end(buf: Any, p: int) -> int:
    """End (exclusive) of the JSON object or array that opens at ``p``; -1 when none
    does or it is not closed. Right for valid JSON only: callers validate the slice.
    Vectorised: a window from ``p`` is scanned at once (strings masked out, then the
    running depth), doubling until the value closes in it."""
    stop = len(buf)
    if p >= stop or buf[p] not in (_OPEN, _BRACKET_OPEN):
        return -1
    size = CHUNK
    while True:
        end = _closing(np.asarray(buf[p : p + size], np.uint8))
        if end >= 0:
            return p + end + 1
        if p + size >= stop:
            return -1
        size *= 2


def _closing(w: np.ndarray) -> int:
    """Index in ``w`` (a value's bytes from its opening bracket) of the bracket that
    closes it, -1 if none does within ``w``."""
    backslash = w == _ESCAPE
    at = np.arange(len(w))
    last_other = np.maximum.accumulate(np.where(backslash, -1, at))
    run = at - last_other  # backslashes ending here
    escaped = np.zeros(len(w), np.bool_)
    escaped[1:] = run[:-1] % 2 == 1  # after an odd run of backslashes
    quote = (w == _QUOTE) & ~escaped
    outside = (np.cumsum(quote) % 2 == 0) & ~quote
    opens = ((w == _OPEN) | (w == _BRACKET_OPEN)) & outside
    closes = ((w == _CLOSE) | (w == _BRACKET_CLOSE)) & outside
    depth = np.cumsum(opens.astype(np.int64) - closes)
    done = np.flatnonzero(closes & (depth == 0))
    return int(done[0]) if done.size else -1


def find_pod_end(body: bytes, after: bytes) -> int:
    """Where the Pod of a body written as ``{"Pod":<pod><after>...`` ends: just before
    the first ``after`` (a search in C, stopping there; not a scan of the Pod's JSON).
    -1 when the body does not start so (a Pod that is no object included). The caller
    decodes the Pod's bytes, and that fails (the body is then decoded whole) unless
    they are the whole Pod: cut at an ``after`` inside a string or an object of its
    own, a Pod's JSON is cut short, and no proper prefix of a JSON object is one."""
    if not body.startswith(_POD + b"{"):
        return -1
    return body.find(after, len(_POD))


class ByteIndex:
    """Exact item bytes -> the id the caller gave them, and walks over a body's items.

    Items shorter than ``HASHED + 1`` bytes are never indexed (no Node object is)."""

    def __init__(self, capacity_bytes: int = 256 << 20) -> None:
        self.capacity_bytes = capacity_bytes
        self.clear()

    def clear(self) -> None:
        self._items: list[bytes] = []  # by id
        self._heads: dict[bytes, list[int]] = {}  # first HASHED bytes -> ids
        self._lengths = np.zeros(1024, np.int64)
        self._used = 0
        self.count = 0  # ids are 0..count-1

    @property
    def nbytes(self) -> int:
        return self._used

    def add(self, data: bytes) -> int | None:
        """Index one validated item; its id, or None (too short, or the pool is full:
        the caller clears or compacts)."""
        n = len(data)
        if n <= HASHED or self._used + n > self.capacity_bytes:
            return None
        i = self.count
        if i == len(self._lengths):
            self._lengths = np.resize(self._lengths, 2 * i)
        self._items.append(bytes(data))
        self._lengths[i] = n
        self._heads.setdefault(bytes(data[:HASHED]), []).append(i)
        self._used += n
        self.count += 1
        return i

    def walk(
        self, buf: np.ndarray, p: int, ids: np.ndarray, starts: np.ndarray
    ) -> tuple[int, int, int]:
        """Known items from ``p`` (just after ``[`` or a ``,``), written into
        ``ids``/``starts``: (count, stop, why)."""
        data = buf.base if isinstance(buf.base, bytes) and len(buf.base) == len(buf) else None
        if data is None:
            data = buf.tobytes()
        stop = len(data)
        if p < stop and data[p] == _BRACKET_CLOSE:
            return 0, p + 1, FOUND_ALL
        k = 0
        while k < len(ids):
            found = self._find(data, p) if p + HASHED <= stop else -1
            if found < 0:
                return k, p, MISS
            ids[k], starts[k] = found, p
            k += 1
            p += len(self._items[found])
            if data[p] == _BRACKET_CLOSE:
                return k, p + 1, FOUND_ALL
            p += 1
        return k, p, FULL

    def _find(self, data: bytes, p: int) -> int:
        """The id of the item that starts at ``p``, -1 if none seen before does."""
        for i in self._heads.get(data[p : p + HASHED], ())[:PROBES]:
            item = self._items[i]
            end = p + len(item)
            if end < len(data) and data[end] in (_COMMA, _BRACKET_CLOSE) and data[p:end] == item:
                return i
        return -1

    def lengths(self, ids: np.ndarray) -> np.ndarray:
        return self._lengths[ids]
