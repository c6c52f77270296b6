"""Names (and facts) of full Node objects sent in Nodes mode, without re-decoding each.

With ``nodeCacheCapable: false`` kube-scheduler sends every candidate Node in full
(~6 KiB each) on every filter and prioritize call; most are byte-for-byte what it sent
last time. A node's raw JSON is looked up by its hash; a hit is confirmed by finding the
cached name in the bytes (so a hash collision can only cost a decode, never a wrong
name). Facts are applied again only when a node's object differs from the one applied
last (a taint added and removed again is seen both times).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from extender.nodefacts import NodeFacts, facts_from_node
from extender.protocol import node_decoder


class NodeObjectCache:
    def __init__(self, apply: Callable[[NodeFacts], None], capacity: int = 50_000) -> None:
        self._entries: dict[int, tuple[str, bytes, NodeFacts]] = {}
        self._applied: dict[str, int] = {}  # node name -> key of the object applied last
        self._apply = apply
        self._capacity = capacity

    def names(self, raws: list[msgspec.Raw]) -> list[str]:
        """Every node's name; all items are read before any facts are applied, so a bad
        item (msgspec.ValidationError) leaves no partial state behind."""
        entries = [self._entry(bytes(raw)) for raw in raws]
        for i, (_key, (name, _, _)) in enumerate(entries):
            if not name:
                raise msgspec.ValidationError(f"Nodes.items[{i}] has no metadata.name")
        for key, (name, _, facts) in entries:
            if self._applied.get(name) != key:
                self._apply(facts)
                self._applied[name] = key
        return [name for _, (name, _, _) in entries]

    def _entry(self, data: bytes) -> tuple[int, tuple[str, bytes, NodeFacts]]:
        key = hash(data)
        entry = self._entries.get(key)
        if entry is None or entry[1] not in data:
            entry = self._decode(data, key)
        return key, entry

    def _decode(self, data: bytes, key: int) -> tuple[str, bytes, NodeFacts]:
        node = node_decoder.decode(data)
        name = node.metadata.name
        if len(self._entries) >= self._capacity:
            self._entries.clear()
            self._applied.clear()
        entry = self._entries[key] = (name, msgspec.json.encode(name), facts_from_node(node))
        return entry
