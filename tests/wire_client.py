"""filter and prioritize called as the HTTP edge calls them: bodies decoded by the codec,
answers encoded by it, and the replies read back as kube-scheduler reads them. Tests of
the scheduling service use it to see what the server would answer, without a server."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from extender.codec import Codec
from extender.scheduling.service import SchedulingService
from extender.wire.protocol import ExtenderArgs


class WireClient:
    def __init__(self, svc: SchedulingService) -> None:
        self.svc, self.codec = svc, Codec(svc.node_changed)

    def args(self, pod: dict, names: Sequence[str]) -> ExtenderArgs:
        body = {"Pod": pod, "Nodes": None, "NodeNames": list(names)}
        return self.codec.decode_args(msgspec.json.encode(body))

    def filter(self, args: ExtenderArgs) -> tuple[dict, Sequence[str]]:
        """The reply as kube-scheduler reads it, and the passing list the service made
        (expected back as prioritize's candidates, as the server does)."""
        result, passing = self.svc.filter(args)
        reply = msgspec.json.decode(self.codec.encode_filter(result, passing))
        return reply, result.NodeNames or []

    def prioritize(self, args: ExtenderArgs) -> list:
        return msgspec.json.decode(self.codec.encode_priorities(self.svc.prioritize(args)))
