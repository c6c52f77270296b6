"""What the HTTP edge calls: a request body into the protocol's arguments (``decode_args``,
then ``named`` once the edge has checked their bounds), and an answer into bytes
(``encode_filter``, ``encode_priorities``). Everything else in this package stays
behind them.

The codec owns its caches: the name index (every node name seen, by its bytes), the
candidate lists kept by their bytes (``namelists``: a permutation of a kept list is that
list, told by its fingerprint), and the Node objects of Nodes mode (``nodecache``,
whose facts are handed to ``on_node``). What the scheduling side gets is the wire
types and ``extender.wire.names.Candidates``; it never imports this package.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import msgspec
import numpy as np

from extender.codec.namebytes import NameIndex
from extender.codec.namejson import scores_json
from extender.codec.namelists import ArgsDecoder, NameList, same_ids
from extender.codec.nodecache import NodeObjectCache
from extender.state.nodefacts import NodeFacts
from extender.wire.names import Priorities
from extender.wire.protocol import ExtenderArgs, ExtenderFilterResult, encode_filter_result, encoder

KEPT_REPLIES = 8  # prioritize replies kept by their answer object (a few shapes' worth)


class MalformedNode(ValueError):
    """A Node object in ``Nodes.items`` that cannot be read (the body itself could)."""


class Codec:
    def __init__(self, on_node: Callable[[NodeFacts], None]) -> None:
        self.index = NameIndex()
        self.nodes = NodeObjectCache(on_node, index=self.index)
        self._args = ArgsDecoder(nodes=self.nodes, index=self.index)
        self._replies: OrderedDict[int, tuple[Priorities, bytes]] = OrderedDict()
        self._last_scores: tuple[NameList, np.ndarray, bytes] | None = None

    def learn(self, node: str) -> tuple[object, int] | None:
        """A node the extender heard of (an agent's report): its name is read ahead of
        the candidate lists that will carry it. Returns the id lists read into ids
        (``Candidates.ids``) will give it and the token they carry, or None if its
        name is left to be read from the lists."""
        wire_id = self.index.learn(node)
        return None if wire_id is None else (self.index.token, wire_id)

    def decode_args(self, body: bytes) -> ExtenderArgs:
        """filter's and prioritize's arguments as sent (raises msgspec's errors for a bad
        body); the edge checks their bounds, then has ``named`` name the Node objects."""
        return self._args.decode(body)

    def named(self, args: ExtenderArgs) -> ExtenderArgs:
        """The arguments with the candidates' names in ``NodeNames`` in both modes (in
        Nodes mode beside the raw items, which a filter reply echoes), each new Node
        object's facts handed to ``on_node``: called once the request's bounds are
        checked, so a refused request changes nothing. ``MalformedNode`` for a Node
        object that cannot be read."""
        if args.Nodes is None or args.NodeNames is not None:
            return args
        try:
            names = self.nodes.names(args.Nodes)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise MalformedNode(f"malformed node in Nodes.items: {e}") from None
        return ExtenderArgs(Pod=args.Pod, Nodes=args.Nodes, NodeNames=names)

    def encode_filter(
        self, result: ExtenderFilterResult, passing: list[msgspec.Raw] | None
    ) -> bytes:
        """The filter reply; a passing list of names read by id is written from the
        index's bytes and expected back as prioritize's candidates."""
        names = result.NodeNames
        if passing is not None or not isinstance(names, NameList):
            return encode_filter_result(result, passing)
        reply = encode_filter_result(result, None, names.json())
        self._args.expect(names)
        return reply

    def encode_priorities(self, answer: Priorities) -> bytes:
        """The ``HostPriority`` list. The same answer object (a plan's, asked again) gets
        the very bytes of last time; names read by id are written from the index's bytes
        (no ``str`` or struct per node), and the same nodes with the same scores as the
        last such reply (pods of new shapes often pass the same nodes) reuse it."""
        kept = self._replies.get(id(answer))
        if kept is not None and kept[0] is answer:
            self._replies.move_to_end(id(answer))
            return kept[1]
        reply = self._written(answer)
        self._replies[id(answer)] = (answer, reply)
        while len(self._replies) > KEPT_REPLIES:
            self._replies.popitem(last=False)
        return reply

    def _written(self, answer: Priorities) -> bytes:
        names, scores = answer.names, answer.scores
        if not (
            isinstance(names, NameList)
            and names.ids is not None
            and names.token is self.index.token
        ):
            return encoder.encode(answer.host_priorities())
        last = self._last_scores
        if last is not None and same_ids(last[0], names) and np.array_equal(last[1], scores):
            return last[2]
        reply = scores_json(self.index, names.ids, scores)
        self._last_scores = (names, scores, reply)
        return reply
