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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import msgspec

from extender.namelists import NameList, names_key
from extender.nodefacts import NodeFacts, facts_from_node
from extender.protocol import node_decoder

HEAD = 512
_META = b'"metadata":{'

Key = bytes | int  # a head, or the hash of the whole object
Entry = tuple[str, bytes, NodeFacts]  # name, its JSON string, facts


class NodeObjectCache:
    def __init__(self, apply: Callable[[NodeFacts], None], capacity: int = 50_000) -> None:
        self._entries: dict[Key, Entry] = {}
        self._applied: dict[str, Entry] = {}  # node name -> the object applied last
        self._apply = apply
        self._capacity = capacity
        # the last list: its entries and names, valid while nothing else was applied
        self._last: tuple[list[Entry], NameList] | None = None

    def names(self, raws: list[msgspec.Raw]) -> list[str]:
        """Every node's name; all items are read before any facts are applied, so a bad
        item (msgspec.ValidationError) leaves no partial state behind. The very objects
        of the last call give the very same list back (a ``NameList``: the plan and row
        caches then know it by identity)."""
        heads = [bytes(memoryview(raw)[:HEAD]) for raw in raws]
        found = list(map(self._entries.get, heads))
        last, self._last = self._last, None
        if last is not None and found == last[0]:  # compared by identity per item: fast
            self._last = last
            return last[1]
        complete = None not in found
        if not complete:  # new objects, or ones without an identifying head
            for i, entry in enumerate(found):
                if entry is None:
                    found[i] = self._by_hash(bytes(raws[i]))
            complete = all(self._entries.get(h) is e for h, e in zip(heads, found, strict=True))
        entries = cast(list[Entry], found)
        names = [name for name, _, _ in entries]
        if "" in names:
            raise msgspec.ValidationError(f"Nodes.items[{names.index('')}] has no metadata.name")
        applied = self._applied
        for entry in entries:  # one entry object per distinct node object
            if applied.get(entry[0]) is not entry:
                self._apply(entry[2])
                applied[entry[0]] = entry
        listed = NameList(names, names_key(names))
        if complete:  # every object now known by its head: the next call can compare them
            self._last = (entries, listed)
        return listed

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
            self._last = None
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
            if end < len(data) and data[end:end + 1] in (b",", b"}"):
                return end
    return -1
