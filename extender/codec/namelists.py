"""Candidate node-name lists as kube-scheduler sends them, decoded once per distinct list.

In NodeNames mode every filter and prioritize call carries the candidate list: the same
5,000 names, pod after pod, until a node joins or leaves. Decoding it into 5,000 new
strings, then hashing and comparing them to find the cached plan and rows, cost more
than evaluating the pod (~0.3 ms of ~0.5 ms at 5,000 nodes). Here the list stays raw
JSON until its bytes are looked up: a known list comes back as the very ``NameList``
object decoded the first time, carrying its key, so caches recognise it by identity. A
list not seen before in these bytes (a permutation: kube-scheduler sends one per pod) is
read by ``namebytes`` into ids (its reply is written from their bytes), unless it
holds the very names of a kept list: then it is that list (its fingerprint).

NameLists are shared between requests: nothing may mutate one.

Bodies are split by hand where Go's encoder wrote them exactly as kube-scheduler does:
the Pod is decoded alone; a NodeNames list is looked up by its bytes as they stand (no
JSON scan of 64 KiB first); Node items are found by the node cache's ``walk`` (by their
bytes), so the megabytes of Node JSON are never parsed again. Anything else is decoded
whole, which also names what is wrong with it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Protocol, cast

import msgspec
import numpy as np

from extender.codec.namebytes import Fingerprint, NameIndex
from extender.codec.namejson import names_json
from extender.codec.nodebytes import find_pod_end
from extender.scoring.batch import Ints
from extender.wire.names import Candidates, names_key, same_names
from extender.wire.protocol import ExtenderArgs, NodeName, Pod, RawNodeList, args_decoder

__all__ = ["ArgsDecoder", "NameList", "name_ids", "names_key", "same_ids", "same_names"]


class NameList(Candidates):
    """A decoded candidate list (``Candidates``), the key its bytes gave it, and its
    names' ids in the ``NameIndex`` that had ``token`` (see ``name_ids``). The strings
    come from ``pool``, the index's array as it was when the list was read (an index
    that grows or clears makes a new one; this one keeps its entries); its JSON from
    the index's bytes (``json``)."""

    __slots__ = ("_index",)

    def __init__(
        self, names: Sequence[str], key: Hashable, ids: Ints | None = None, token: object = None
    ) -> None:
        super().__init__(names, key, ids, token)
        self._index: NameIndex | None = None  # the index the ids are of, while ``token``

    @classmethod
    def of_ids(cls, ids: Ints, index: NameIndex, key: Hashable) -> NameList:
        """The names with these ids in ``index`` (as it is now)."""
        names = cls((), key, ids, index.token)
        names._names, names._pool, names._index = None, index.pool(), index
        return names

    def json(self) -> bytes:
        """The list as JSON (``["a","b"]``, as Go's encoder writes it), made once: written
        from the index's bytes while the ids are valid (``namejson``), else encoded."""
        if self.memo is None:
            index = self._index
            if self.ids is not None and index is not None and self.token is index.token:
                self.memo = names_json(index, self.ids)
            else:
                self.memo = msgspec.json.encode(self.as_list())
        return cast(bytes, self.memo)


def name_ids(index: NameIndex, names: Sequence[str]) -> Ints | None:
    """The names' ids in ``index`` (None if a name is not plain), worked out once per
    ``NameList`` while the index keeps its ids."""
    if isinstance(names, NameList):
        if names.token is not index.token:
            strings = names.as_list()  # made before its ids change: its pool is the old one
            names.ids, names.token, names._index = index.ids_of(strings), index.token, index
            names._pool = index.pool() if names.ids is not None else None  # theirs now
        return names.ids
    return index.ids_of(names)


def same_ids(a: NameList, b: NameList) -> bool:
    """Whether two lists name the same nodes in the same order, told by their ids in one
    index (a compare of arrays, no strings); False when either has none."""
    if a.ids is None or b.ids is None or a.token is not b.token:
        return False
    return a.ids is b.ids or bool(np.array_equal(a.ids, b.ids))


class _WireArgs(msgspec.Struct):
    """``ExtenderArgs`` with the Pod and the candidate list left as raw JSON."""

    Pod: msgspec.Raw = msgspec.Raw()
    Nodes: RawNodeList | None = None
    NodeNames: msgspec.Raw = msgspec.Raw()


_wire = msgspec.json.Decoder(_WireArgs)
_names = msgspec.json.Decoder(list[NodeName] | None)
_pod = msgspec.json.Decoder(Pod | None)

# ExtenderArgs{Pod, Nodes: &v1.NodeList{Items}, NodeNames: nil} as encoding/json writes it
_POD = b'{"Pod":'
_ITEMS = b',"Nodes":{"metadata":{},"items":['
_TAIL = b'},"NodeNames":null}'
_NAMES = b',"Nodes":null,"NodeNames":'
_CLOSE = ord("}")
_SPACE = b" \t\r\n"
_ENDS = 256  # bytes from each end of a name list that key it (the rest is compared)


_Kept = tuple[bytes, NameList, Fingerprint | None]


def _key(data: bytes) -> Hashable:
    return ("names", len(data), data[:_ENDS], data[-_ENDS:])


class NodeWalker(Protocol):
    def walk(self, body: bytes, start: int) -> tuple[RawNodeList, int] | None: ...


class ArgsDecoder:
    """Decodes filter/prioritize bodies into ``ExtenderArgs``, name lists interned and
    Node lists walked by bytes (when given the node cache)."""

    def __init__(
        self, capacity: int = 8, nodes: NodeWalker | None = None, index: NameIndex | None = None
    ) -> None:
        # kept lists by their bytes' key: (bytes, list, fingerprint when read here)
        self._lists: OrderedDict[Hashable, _Kept] = OrderedDict()
        self._sets: dict[Fingerprint, NameList] = {}  # the kept lists by what they hold
        self._capacity = capacity
        self._nodes = nodes
        self._index = index if index is not None else NameIndex()
        self._last_pod: tuple[bytes, Pod | None] = (b"", None)
        self._expected: NameList | None = None
        self._unprinted: Hashable | None = None  # the first list's key, not fingerprinted yet

    def decode(self, body: bytes) -> ExtenderArgs:
        split = self._split(body)
        if split is not None:
            return split
        walked = self._walked(body) if self._nodes is not None else None
        if walked is not None:
            return walked
        try:
            wire = _wire.decode(body)
            pod = self.pod(bytes(wire.Pod))
        except (msgspec.DecodeError, msgspec.ValidationError):
            args_decoder.decode(body)  # raises the error as a whole-body decode names it
            raise
        raw = wire.NodeNames
        names = self.names(bytes(raw)) if len(raw) else None
        return ExtenderArgs(Pod=pod, Nodes=wire.Nodes, NodeNames=names)

    def pod(self, data: bytes) -> Pod | None:
        """The Pod in ``data`` (empty: none). filter and prioritize carry the same Pod: the
        same bytes give the very object decoded before, so what the service derives from
        a Pod (its demand) is recognised by identity."""
        if data == self._last_pod[0]:
            return self._last_pod[1]
        pod = _pod.decode(data) if data else None
        self._last_pod = (data, pod)
        return pod

    def _split(self, body: bytes) -> ExtenderArgs | None:
        """A NodeNames body exactly as kube-scheduler writes it (``{"Pod":..,"Nodes":null,
        "NodeNames":[..]}``), taken apart by hand: the Pod found by what follows it and decoded
        alone, the list's bytes looked up as they are. Spares a JSON scan of the whole
        body (64 KiB at 5,000 names) on every filter. None (decode it whole, which also
        names what is wrong) for anything else, a bad Pod or a bad list included."""
        pod_end = find_pod_end(body, _NAMES)
        if pod_end < 0:
            return None
        end = len(body.rstrip(_SPACE)) - 1
        if end <= pod_end + len(_NAMES) or body[end] != _CLOSE:
            return None
        try:
            pod = self.pod(body[len(_POD) : pod_end])
            names = self.names(body[pod_end + len(_NAMES) : end])
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        return ExtenderArgs(Pod=pod, Nodes=None, NodeNames=names)

    def _walked(self, body: bytes) -> ExtenderArgs | None:
        assert self._nodes is not None
        if not body[-64:].rstrip(_SPACE).endswith(_TAIL):
            return None
        pod_end = find_pod_end(body, _ITEMS)
        if pod_end < 0:
            return None
        walked = self._nodes.walk(body, pod_end + len(_ITEMS))
        if walked is None:
            return None
        nodes, end = walked
        if body[end:].rstrip(_SPACE) != _TAIL:
            return None
        try:
            pod = self.pod(body[len(_POD) : pod_end])
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None  # decoded whole, the error names its place in the body
        return ExtenderArgs(Pod=pod, Nodes=nodes, NodeNames=None)

    def names(self, data: bytes) -> NameList | None:
        """The list in ``data``, the very object of last time when the bytes are the same.
        Known by both ends of its bytes, then compared whole: hashing all 64 KiB of a
        5,000-name list took longer than the compare.

        A list of the very names of a kept one in another order is that one, order and
        all: kube-scheduler reads a filter's passing names and prioritize's scores by
        name, so the order of a list changes no answer it acts on, and its parallel
        filter workers send the same candidates in a new order for every pod. Told by
        fingerprint (``NameIndex.fingerprint``): no name looked up, and the plan made for
        the list answers it, reply and all. While no list is kept (the first after a
        start), there is none it could be: its bytes are not hashed, it is read into ids,
        and it is fingerprinted from the hashes its names got when they were added only
        once a list of other bytes comes (``_print_first``), not inside the first filter
        after a start, where those hashes are cold in memory (docs/BENCHMARKS.md, "Cold
        start")."""
        key = _key(data)
        seen = self._lists.get(key)
        if seen is not None and seen[0] == data:
            self._lists.move_to_end(key)
            return seen[1]
        if self._unprinted is not None:
            self._print_first()
        fingerprint = self._index.fingerprint(data) if self._sets else None
        same = self._sets.get(fingerprint) if fingerprint is not None else None
        if same is not None:  # not kept under these bytes: they will not come again
            self._lists.move_to_end(same.key)
            return same
        found = self._read(data, key)
        if found is not None:
            self._keep(key, data, found, fingerprint)
            if not self._sets and found.ids is not None and found.token is self._index.token:
                self._unprinted = key
        return found

    def _print_first(self) -> None:
        """The first list's fingerprint, from its ids, now that a list of other bytes has
        come that may hold the same names in another order; none when it is gone, or its
        ids are void (the index started over)."""
        key, self._unprinted = self._unprinted, None
        kept = self._lists.get(key)
        if kept is None:
            return
        data, names, _ = kept
        if names.ids is None or names.token is not self._index.token:
            return
        fingerprint = self._index.fingerprint_of(names.ids)
        self._lists[key] = (data, names, fingerprint)
        self._sets[fingerprint] = names

    def expect(self, names: NameList) -> None:
        """A list about to come back: kube-scheduler sends prioritize the nodes the filter
        passed, in the reply's order, as Go's encoder writes them. Kept under those bytes,
        its read is a compare instead of a parse and a look-up per name (~0.05-0.1 ms for
        625 names, cold), and it comes with its ids. A list already kept stays the object
        it is (caches downstream know it by identity)."""
        if names is self._expected or names.ids is None:
            return
        self._expected = names
        data = names.json()
        key = _key(data)
        seen = self._lists.get(key)
        if seen is None or seen[0] != data:  # no fingerprint: it comes back as it is
            self._keep(key, data, names.keyed(key), None)

    def _keep(
        self, key: Hashable, data: bytes, names: NameList, fingerprint: Fingerprint | None
    ) -> None:
        old = self._lists.pop(key, None)
        if old is not None:
            self._forget(old)
        self._lists[key] = (data, names, fingerprint)
        if fingerprint is not None:
            self._sets[fingerprint] = names
        while len(self._lists) > self._capacity:
            self._forget(self._lists.popitem(last=False)[1])

    def _forget(self, kept: _Kept) -> None:
        _, names, fingerprint = kept
        if fingerprint is not None and self._sets.get(fingerprint) is names:
            del self._sets[fingerprint]

    def _read(self, data: bytes, key: Hashable) -> NameList | None:
        read = self._index.read_ids(data)
        if read is not None:
            return NameList.of_ids(read[0], self._index, key)
        try:  # not plain names: decoded as JSON, which also names what is wrong
            decoded = _names.decode(data)
        except msgspec.ValidationError as e:  # name the field as a whole-body decode would
            msg = str(e)
            msg = (
                msg.replace("at `$", "at `$.NodeNames")
                if "at `$" in msg
                else (f"{msg} - at `$.NodeNames`")
            )
            raise msgspec.ValidationError(msg) from None
        return None if decoded is None else NameList(decoded, key)
