"""Node names known by their bytes: a candidate list read into ids, no new strings made.

In NodeNames mode each filter carries up to 5,000 names, in a new order for every pod
(kube-scheduler's parallel filter workers hand feasible nodes over as they finish).
Replies are written from the names' bytes by id (``namejson``), so a list is read into
ids: the JSON array is split at its quotes (``bytes.split``, in C), its punctuation
checked, and each name's bytes looked up in a dict of the names seen before. No
``str`` is made for a name seen before; a new one is decoded once. A permutation of a
list read before, what kube-scheduler sends for most pods, is told by ``fingerprint``
instead: one pass hashing the body's names, none split out or looked up. Names
agents reported are learned ahead of the lists (``learn``); a list of learned names, the
first after a start above all, is read into ids by hash (``learned``), not by dict.

Names are interned for the process: the same bytes always give the same id and the very
same ``str``. The pool is bounded; when full it is cleared and ids start again, and the
``token`` changes so that ids read before are known to be void. Only plain names (no
escape, no control character: every Kubernetes node name) are read here; anything else
is left to the JSON decoder, which also names what is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from extender.codec import golist  # compiled from golist.c when the package is built
from extender.codec.learned import LearnedNames

NAME_MAX = 253  # protocol.NodeName: a DNS subdomain
WORDS = (NAME_MAX + 7) // 8  # 8-byte words of the longest name
Fingerprint = tuple[int, int, int]  # see NameIndex.fingerprint
_SPACE = b" \t\n\r"  # JSON's whitespace
_CONTROL = bytes(range(0x20))
BODIES = 8  # recent bodies whose ids are kept


def split_names(data: bytes) -> list[bytes] | None:
    """The names of a JSON array of plain names, as bytes; None for any other value."""
    body = data.strip(_SPACE)
    if body[:1] != b"[" or body[-1:] != b"]" or b"\\" in body or b'""' in body:
        return None  # an escape, or an empty name (or two strings with nothing between)
    parts = body[1:-1].split(b'"')
    if len(parts) == 1:
        return [] if not parts[0].strip(_SPACE) else None
    if len(parts) % 2 == 0 or parts[0].strip(_SPACE) or parts[-1].strip(_SPACE):
        return None
    names, seps = parts[1::2], parts[2:-1:2]
    if seps and (seps.count(b",") != len(seps)) and any(s.strip(_SPACE) != b"," for s in seps):
        return None
    joined = b"".join(names)
    if len(joined.translate(None, _CONTROL)) != len(joined):
        return None  # a control character: JSON decodes its escaped form only
    if max(map(len, names)) > NAME_MAX:
        return None
    return names


def _summed(hashes: np.ndarray, shares: np.ndarray) -> Fingerprint:
    """A fingerprint from its names' hashes and set shares (sums wrap: order-free)."""
    return len(hashes), int(hashes.sum(dtype=np.uint64)), int(shares.sum(dtype=np.uint64))


class NameIndex:
    """Name bytes -> id -> the one ``str`` for it."""

    def __init__(self, capacity_bytes: int = 64 << 20, weights: np.ndarray | None = None) -> None:
        """``weights``: accepted for callers of the hashed index this replaced; names are
        told apart by their whole bytes (a dict), so no two can collide."""
        self.capacity_bytes = capacity_bytes
        self.clear()

    def clear(self) -> None:
        self._ids: dict[bytes, int] = {}
        self._bytes: list[bytes] = []  # by id
        self._strings = np.empty(1024, dtype=object)
        # per id, the name's hash and set share (``fingerprint``), made when it is
        # added: a list read into ids is fingerprinted by summing them (``fingerprint_of``)
        self._keys = np.zeros((2, 1024), np.uint64)
        self._rng = np.random.default_rng()
        self._learned = LearnedNames(self._rng)  # found by hash: the first list after a start
        # the fingerprint's keys, secret to the process: per word of a name a key and an
        # odd weight (``_keyed``), then the set share's key
        self._hash_keys = self._rng.integers(0, 2**64, 2 * WORDS + 1, np.uint64)
        self._hash_keys[WORDS : 2 * WORDS] |= np.uint64(1)
        self._used = 0  # bytes of names held
        self.count = 0
        self.token = object()  # ids are valid while this is the index's token
        self._last: tuple[bytes, object, np.ndarray | None] | None = None  # see read_ids
        # the ids of the last few bodies read, by their bytes: pod after pod of a shape
        # lists the same candidates in the same bytes, found by one hash of the body
        # instead of a dict look-up per name
        self._bodies: dict[bytes, np.ndarray | None] = {}

    def read(self, data: bytes) -> tuple[np.ndarray, list[str]] | None:
        """The ids and strings of a JSON array of plain names; None for any other value
        (decode it as JSON: that also gives the error). New names are added."""
        found = self.read_ids(data)
        return None if found is None else (found[0], found[1][found[0]].tolist())

    def fingerprint(self, data: bytes) -> Fingerprint | None:
        """What a JSON array of plain names holds, whatever their order: (how many, and
        two sums over the names of keyed 64-bit hashes of their bytes, ``_keyed``). Two
        lists of the same names in any order have the same; two that differ, another but
        for a chance of about 2^-64 per pair of names. None for a value ``read`` gives
        None for but a name that is not UTF-8. No name is looked up: a permuted list is
        told from its bytes in one pass (``golist.c``)."""
        found = golist.fingerprint(data, self._hash_keys)
        if found is None:
            names = split_names(data)
            if names is None:
                return None
            if not names:
                return 0, 0, 0
            found = golist.fingerprint(b'["' + b'","'.join(names) + b'"]', self._hash_keys)
            assert found is not None  # as Go writes it
        return found

    def fingerprint_of(self, ids: np.ndarray) -> Fingerprint:
        """``fingerprint`` of the list these ids (read while the token holds) name, from
        the hashes each name got when it was added: a list read into ids for the first
        time needs no pass over its bytes to be known again in another order."""
        return _summed(self._keys[0, ids], self._keys[1, ids])

    def _keyed(self, data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        """Each name's keyed hash and its set share, for a list as Go writes it (None for
        any other bytes). The hash: word j of the name (8 bytes, little-endian, bytes past
        its end zero) mixed under its own key and weighted, the words summed, the length
        mixed in; a keyed mix per word, not a plain weighted sum, since names whose words
        differ only in a swap of their top bytes collide under a sum. The share: the hash
        mixed again under the last key. ``golist.keyed``: one pass over the body."""
        hashes, shares = np.empty((2, len(data) // 4), np.uint64)
        count = golist.keyed(data, self._hash_keys, hashes, shares)
        return None if count < 0 else (hashes[:count], shares[:count])

    def read_ids(self, data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        """``read``, with the strings left in the pool they are in: (ids, pool), the
        string of id i being pool[i] (the pool is never written again below its count).
        The last body's answer is kept while the token holds: the server asks for its
        fingerprint, then its ids."""
        ids = self._read(data)
        return None if ids is None else (ids, self._strings)

    def _read(self, data: bytes) -> np.ndarray | None:
        last = self._last
        if last is not None and last[0] is data and last[1] is self.token:
            return last[2]
        if data in self._bodies:
            kept = self._bodies[data]
            ids = None if kept is None else kept.copy()  # the caller's own, as when read
        else:
            token = self.token
            ids = self._ids_of(data)
            if self.token is not token:  # cleared: ids of bodies read before are void
                self._bodies.clear()
            while len(self._bodies) >= BODIES:
                del self._bodies[next(iter(self._bodies))]
            self._bodies[data] = ids
        self._last = (data, self.token, ids)
        return ids

    def _ids_of(self, data: bytes) -> np.ndarray | None:
        known = self._known_ids(data)
        if known is not None:
            return known
        names = split_names(data)
        if names is None:
            return None
        for _ in range(2):  # a full index is cleared once: these names go in first
            found = list(map(self._ids.get, names))
            added = self._add_new(names, found) if None in found else True
            if added is None:
                return None
            if not added:
                self.clear()
                continue
            return np.fromiter(found, np.int64, len(found))
        return None

    def _add_new(self, names: list[bytes], found: list[int | None]) -> bool | None:
        """Gives each name not yet known an id (once, however often listed), writing it
        into ``found``; False (nothing added) when they would overfill the index, None
        when a name is not UTF-8 or not plain (``golist`` cannot read it)."""
        new: dict[bytes, int] = {}
        for k, i in enumerate(found):
            if i is None:
                found[k] = new.setdefault(names[k], self.count + len(new))
        try:
            strings = [name.decode() for name in new]
        except UnicodeDecodeError:
            return None
        keyed = self._keyed(b'["' + b'","'.join(new) + b'"]')  # as Go writes them
        if keyed is None:
            return None
        size = sum(map(len, new))
        if self._used + size > self.capacity_bytes:
            return False
        self._reserve(len(new))
        ids = slice(self.count, self.count + len(new))
        self._strings[ids] = strings
        self._keys[0, ids], self._keys[1, ids] = keyed
        self._ids.update(new)
        self._bytes.extend(new)
        self._used += size
        self.count += len(new)
        return True

    def _reserve(self, names: int) -> None:
        """Room for ``names`` more; a grown pool is a new array (lists read before keep
        the old one, whose entries never change)."""
        if self.count + names > len(self._strings):
            size = max(2 * len(self._strings), self.count + names)
            strings = np.empty(size, dtype=object)
            strings[: self.count] = self._strings[: self.count]
            self._strings = strings
            keys = np.zeros((2, size), np.uint64)
            keys[:, : self.count] = self._keys[:, : self.count]
            self._keys = keys

    def _known_ids(self, data: bytes) -> np.ndarray | None:
        """The ids of a list as Go writes it whose every name was learned (``learned``:
        one pass over the body, no dict look-up per name); None for any other list."""
        return self._learned.find(data)

    def learn(self, name: str) -> int | None:
        """Intern a node's name before any list names it (an agent reported the node):
        the first filter after a start or failover then finds its 5,000 names known
        instead of decoding each. Returns its id (None: a name that is not plain, or
        would overfill the index, is left to the lists that carry it). The pool keeps
        ``name`` itself, hashed: the object the inventory keys the node by, so a
        look-up of a list's strings there finds each by identity."""
        data = name.encode()
        known = self._ids.get(data)
        if known is not None:
            return known
        if msgspec.json.encode(name) != b'"' + data + b'"' or not self._add_new([data], [None]):
            return None
        hash(name)  # computed now, at report intake, not on a filter
        wire_id = self.count - 1
        self._strings[wire_id] = name
        self._learned.add(wire_id, data)
        return wire_id

    def name_bytes(self) -> list[bytes]:
        """Every name's bytes by id, for writing names without making strings
        (``namejson``). Valid for ids read while the token holds."""
        return self._bytes

    def pool(self) -> np.ndarray:
        """The strings by id, as ``read_ids`` gives them (never written below ``count``)."""
        return self._strings

    def ids_of(self, names: Sequence[str]) -> np.ndarray | None:
        """Ids of names already decoded (a Nodes list, a caller's own list); None when a
        name is not plain."""
        found = self.read_ids(msgspec.json.encode(names))  # ids only: no strings made
        return None if found is None else found[0]
