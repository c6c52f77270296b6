"""Names (and facts) of full Node objects sent in Nodes mode, without re-decoding each.

With ``nodeCacheCapable: false`` kube-scheduler sends every candidate Node in full
(~6 KiB each) on every filter and prioritize call; most are byte-for-byte what it sent
last time. A node is recognised by a key, and decoded only when the key is new:

- the **head**: its first ``HEAD`` bytes, when they hold ``metadata.name`` and
  ``metadata.resourceVersion`` as flat top-level keys of ``metadata`` (as Go's encoder
  writes an apiserver object: kind, apiVersion, then metadata with name, uid,
  resourceVersion first). The API server gives every change of an object a new
  resourceVersion, so the same name and version are the same object: looking up 512
  bytes costs ~0.3 µs where hashing 6 KiB costs ~2 µs — at 5,000 nodes the difference
  between a fraction of the floor and most of it (docs/BENCHMARKS.md);
- otherwise (no resourceVersion, other layout): the hash of its whole JSON, confirmed
  by finding the cached name in the bytes (a collision costs a decode, never a wrong
  name).

Facts are applied again only when a node's object differs from the one applied last (a
taint added and removed again is seen both times).

Finding the items at all is the larger cost (a JSON scan of the whole body): ``walk``
finds the objects seen before by their exact bytes instead (``extender.codec.nodebytes``), and
decodes only the few it does not know.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import cast, overload

import msgspec
import numpy as np

from extender.codec.namebytes import NameIndex
from extender.codec.namelists import NameList, names_key
from extender.codec.nodebytes import FOUND_ALL, FULL, ByteIndex, value_end
from extender.state.nodefacts import NodeFacts, facts_from_node
from extender.wire.protocol import RawNodeList, node_decoder

HEAD = 512
_META = b'"metadata":{'

Key = bytes | int  # a head, or the hash of the whole object
Entry = tuple[str, bytes, NodeFacts]  # name, its JSON string, facts
MAX_NEW = 64  # unknown items decoded one by one in a walk; more: the whole body at once
RECENT = 4  # candidate lists remembered (filter's and prioritize's, a few pods' worth)
_syntax = msgspec.json.Decoder(msgspec.Raw)  # validates JSON, builds nothing


class ItemSlices(Sequence[memoryview]):
    """The items of a walked body, as slices of it (the filter reply echoes some)."""

    def __init__(self, body: bytes, starts: np.ndarray, ends: np.ndarray) -> None:
        self._view = memoryview(body)
        self._starts = starts  # arrays: prioritize never reads an item, filter a few
        self._ends = ends

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, i: int) -> memoryview: ...
    @overload
    def __getitem__(self, i: slice) -> list[memoryview]: ...
    def __getitem__(self, i: int | slice) -> memoryview | list[memoryview]:
        if isinstance(i, slice):
            return list(self._slices(self._starts[i], self._ends[i]))
        return self._view[int(self._starts[i]) : int(self._ends[i])]

    def __iter__(self) -> Iterator[memoryview]:
        return self._slices(self._starts, self._ends)

    def _slices(self, starts: np.ndarray, ends: np.ndarray) -> Iterator[memoryview]:
        view = self._view
        return (view[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True))


class WalkedNodes(RawNodeList, kw_only=True):
    """``Nodes`` of a body walked by bytes: items as slices, each already resolved (the id
    its bytes have in the node cache's byte index; its entry is the cache's by that id)."""

    byte_ids: np.ndarray = msgspec.field(default_factory=lambda: np.zeros(0, np.int64))


class NodeObjectCache:
    def __init__(
        self,
        apply: Callable[[NodeFacts], None],
        capacity: int = 50_000,
        index: NameIndex | None = None,
    ) -> None:
        self._entries: dict[Key, Entry] = {}
        self._applied: dict[str, Entry] = {}  # node name -> the object applied last
        self._apply = apply
        self._capacity = capacity
        # recent lists (filter's and prioritize's alternate): entries, names, and the
        # count of facts applications when every entry of theirs was the one applied
        self._recent: OrderedDict[tuple[int, ...], tuple[list[Entry], NameList, int]] = (
            OrderedDict()
        )
        self._applications = 0
        self._bytes = ByteIndex()
        self._by_id: list[Entry] = []  # ByteIndex id -> entry
        self._byte_id: dict[int, int] = {}  # id() of an entry whose bytes are indexed -> id
        # per byte id: its entry is the one applied last for its node (a walked list whose
        # every object is needs nothing applied: no pass over 5,000 entries in Python)
        self._current = np.zeros(1024, np.bool_)
        self._recent_walked: OrderedDict[tuple[int, ...], tuple[np.ndarray, NameList]] = (
            OrderedDict()
        )
        self._generation = 0  # bumped whenever the byte index is cleared
        self._ids = np.zeros(1024, np.int64)
        self._starts = np.zeros(1024, np.int64)
        # byte index id -> the node name's id in ``index`` (-1: not looked up yet), valid
        # while the index has the token it had then: lists come out as ids (see _listed)
        self._name_index = index
        self._name_ids = np.full(1024, -1, np.int64)
        self._name_token: object = None

    def names(self, nodes: RawNodeList) -> Sequence[str]:
        """Every node's name; all items are read before any facts are applied, so a bad
        item (msgspec.ValidationError) leaves no partial state behind. The very objects
        of the last call give the very same list back (a ``NameList``: the plan and row
        caches then know it by identity)."""
        if isinstance(nodes, WalkedNodes):
            return self._walked(nodes.byte_ids)
        raws = nodes.items
        heads = [bytes(memoryview(raw)[:HEAD]) for raw in raws]
        found = list(map(self._entries.get, heads))
        complete = None not in found
        if not complete:  # new objects, or ones without an identifying head
            for i, entry in enumerate(found):
                if entry is None:
                    found[i] = self._by_hash(bytes(raws[i]))
            complete = all(self._entries.get(h) is e for h, e in zip(heads, found, strict=True))
        entries = cast(list[Entry], found)
        self._index_bytes(raws, entries)
        return self._named(entries, complete)

    def _named(self, entries: list[Entry], complete: bool) -> Sequence[str]:
        key = (len(entries), id(entries[0]), id(entries[-1])) if entries else (0,)
        seen = self._recent.get(key)
        if seen is not None and seen[0] != entries:  # compared by identity per item: fast
            seen = None
        if seen is not None and seen[2] == self._applications:  # nothing applied since
            self._recent.move_to_end(key)
            return seen[1]
        listed = seen[1] if seen is not None else self._listed(entries)
        self._apply_all(entries)
        if complete:  # every object now known by its head: the next call can compare them
            self._recent[key] = (entries, listed, self._applications)
            self._recent.move_to_end(key)
            while len(self._recent) > RECENT:
                self._recent.popitem(last=False)
        return listed

    def _walked(self, byte_ids: np.ndarray) -> Sequence[str]:
        """``_named`` for a walked list, by byte ids: the very list of last time for the
        same objects, facts applied only when some object is not the one applied last
        (and only once the list is read whole: a nameless item applies nothing)."""
        if not len(byte_ids):
            return self._named([], True)
        key = (len(byte_ids), int(byte_ids[0]), int(byte_ids[-1]))
        seen = self._recent_walked.get(key)
        if seen is not None and np.array_equal(seen[0], byte_ids):
            self._recent_walked.move_to_end(key)
            listed = seen[1]
        else:
            listed = self._listed_by_ids(byte_ids)
            self._recent_walked[key] = (byte_ids, listed)
            while len(self._recent_walked) > RECENT:
                self._recent_walked.popitem(last=False)
        if not _all_set(self._current, byte_ids):
            self._apply_all([self._by_id[i] for i in byte_ids.tolist()])
        return listed

    def _apply_all(self, entries: list[Entry]) -> None:
        """Each node's facts from its object in ``entries`` unless that object is the one
        applied last (one entry object per distinct node object)."""
        applied, current, byte_id = self._applied, self._current, self._byte_id
        for entry in entries:
            last = applied.get(entry[0])
            if last is not entry:
                self._apply(entry[2])
                applied[entry[0]] = entry
                self._applications += 1
                if last is not None and id(last) in byte_id:
                    current[byte_id[id(last)]] = False
            at = byte_id.get(id(entry))
            if at is not None:
                current[at] = True

    def _listed_by_ids(self, byte_ids: np.ndarray) -> NameList:
        """A walked list's names, read by id (replies are written from the ids; making 5,000
        strings, hashing them for a key and reading them back through JSON into ids cost
        ~1.5 ms a shuffled list); made from its entries when a name has no id."""
        ids = self._name_ids_of(byte_ids)
        if ids is not None and self._name_index is not None:
            key = ("node ids", len(ids), ids[:32].tobytes(), ids[-32:].tobytes())
            return NameList.of_ids(ids, self._name_index, key)
        return self._listed([self._by_id[i] for i in byte_ids.tolist()])

    def _listed(self, entries: list[Entry]) -> NameList:
        """The entries' names as a list; a nameless one is refused."""
        names = [name for name, _, _ in entries]
        if "" in names:
            raise msgspec.ValidationError(f"Nodes.items[{names.index('')}] has no metadata.name")
        return NameList(names, names_key(names))

    def _name_ids_of(self, byte_ids: np.ndarray) -> np.ndarray | None:
        """The names' ids for these byte ids, looked up in the index once per object;
        None when there is no index or a name is not plain (an empty one included)."""
        index = self._name_index
        if index is None:
            return None
        if self._name_token is not index.token:  # cleared since: every id is void
            self._name_ids[:] = -1
            self._name_token = index.token
        if len(self._name_ids) < len(self._by_id):
            grown = np.full(2 * len(self._by_id), -1, np.int64)
            grown[: len(self._name_ids)] = self._name_ids
            self._name_ids = grown
        got = self._name_ids[byte_ids]
        if (got < 0).any():
            new = np.unique(byte_ids[got < 0])
            ids = index.ids_of([self._by_id[i][0] for i in new.tolist()])
            if ids is None or self._name_token is not index.token:  # not plain, or cleared
                return None
            self._name_ids[new] = ids
            got = self._name_ids[byte_ids]
        return got

    def walk(self, body: bytes, start: int) -> tuple[WalkedNodes, int] | None:
        """The items of the array that opens just before ``start``, found by their bytes,
        and the position after its ``]``; None when the body must be decoded as a whole
        (many unknown items, or something that is not a list of objects: the full decode
        then names what is wrong)."""
        buf = np.frombuffer(body, np.uint8)
        k, p, new, generation = 0, start, 0, self._generation
        while True:
            got, p, why = self._bytes.walk(buf, p, self._ids[k:], self._starts[k:])
            k += got
            if why == FOUND_ALL:
                break
            if why == FULL:
                self._grow()
                continue
            new += 1  # MISS: an object not seen byte for byte before
            end = value_end(buf, p) if new <= MAX_NEW else -1
            if end < 0 or end >= len(body) or body[end] not in b",]":
                return None
            found = self._learn(body[p:end])
            if found is None or self._generation != generation:  # ids found so far are void
                return None
            if k == len(self._ids):
                self._grow()
            self._ids[k], self._starts[k] = found, p
            k += 1
            p = end + 1
            if body[end] == ord("]"):
                break
        ids = self._ids[:k]
        starts = self._starts[:k].copy()
        ends = starts + self._bytes.lengths(ids)
        return WalkedNodes(
            items=cast(list[msgspec.Raw], ItemSlices(body, starts, ends)), byte_ids=ids.copy()
        ), p

    def _learn(self, data: bytes) -> int | None:
        """Validate one unknown item and index it: its id, or None when it is not valid
        JSON or cannot be indexed."""
        try:
            _syntax.decode(data)
            entry = self._entries.get(data[:HEAD]) or self._by_hash(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        return self._index(data, entry)

    def _index_bytes(self, raws: Sequence[msgspec.Raw], entries: list[Entry]) -> None:
        """After a whole-body decode: remember each new object's bytes for next time."""
        indexed = self._byte_id
        for raw, entry in zip(raws, entries, strict=True):
            if id(entry) not in indexed and self._index(bytes(raw), entry) is None:
                return

    def _index(self, data: bytes, entry: Entry) -> int | None:
        i = self._bytes.add(data)
        if i is None:
            if self._bytes.nbytes + len(data) > self._bytes.capacity_bytes:
                self._forget_bytes()  # full of old versions: start over (relearned on use)
            return None
        self._by_id.append(entry)
        self._byte_id[id(entry)] = i
        if i >= len(self._current):
            self._current = np.resize(self._current, 2 * (i + 1))
            self._current[i:] = False
        self._current[i] = self._applied.get(entry[0]) is entry
        return i

    def _forget_bytes(self) -> None:
        self._generation += 1
        self._name_ids[:] = -1  # byte ids start again
        self._bytes.clear()
        self._by_id.clear()
        self._byte_id.clear()
        self._current[:] = False
        self._recent_walked.clear()

    def _grow(self) -> None:
        self._ids = np.resize(self._ids, 2 * len(self._ids))
        self._starts = np.resize(self._starts, 2 * len(self._starts))

    def _by_hash(self, data: bytes) -> Entry:
        key = hash(data)
        entry = self._entries.get(key)
        if entry is None or entry[1] not in data:
            return self._decode(data, key)
        return entry

    def _decode(self, data: bytes, key: int) -> Entry:
        node = node_decoder.decode(data)
        name = node.metadata.name
        if len(self._entries) >= self._capacity:
            self._entries.clear()
            self._applied.clear()
            self._recent.clear()
            self._forget_bytes()
        entry: Entry = (name, msgspec.json.encode(name), facts_from_node(node))
        head = data[:HEAD]
        identified = identifying_head(head, name, node.metadata.resourceVersion)
        self._entries[head if identified else key] = entry
        return entry


def identifying_head(head: bytes, name: str, resource_version: str) -> bool:
    """Whether these first bytes of a node's JSON pin down the whole object: they hold,
    as keys of ``metadata`` before anything nested, its name and then its
    resourceVersion (Go's field order).

    Checked on the decoded object's own values, so JSON laid out any other way (another
    key order, whitespace, a nested value first) only loses the shortcut."""
    if not resource_version or not head.startswith(b"{"):
        return False
    at = head.find(_META)
    if at < 0 or not _flat(head[1:at]):
        return False
    start = at + len(_META)
    version = b'"resourceVersion":' + msgspec.json.encode(resource_version)
    end = _key_at(head, version, start)
    if end < 0 or not _flat(head[start:end]):
        return False
    return _key_at(head[:end], b'"name":' + msgspec.json.encode(name), start) >= 0


def _flat(segment: bytes) -> bool:
    """Only scalar members: nothing that opens an object or array (a brace inside a
    string also counts, which can only lose the shortcut)."""
    return b"{" not in segment and b"[" not in segment


def _key_at(data: bytes, member: bytes, start: int) -> int:
    """End of ``member`` (``"key":value``) as a key of the object opened just before
    ``start``: right after the brace, or after a comma; -1 if not there."""
    for lead in (b"{", b","):
        at = data.find(lead + member, start - 1)
        if at >= 0:
            end = at + 1 + len(member)
            if end < len(data) and data[end : end + 1] in (b",", b"}"):
                return end
    return -1


def _all_set(flags: np.ndarray, at: np.ndarray) -> bool:
    return bool(flags[at].all())
