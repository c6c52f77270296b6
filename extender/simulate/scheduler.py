"""kube-scheduler's side of the extender protocol, as the simulator drives it.

filter -> (one node left: take it, prioritize is not called) -> prioritize ->
total = score x weight x 10 (MaxNodeScore / MaxExtenderPriority) -> highest wins,
ties broken at random (seeded) -> bind. In-tree plugins add the same to every node
here (the simulated nodes are alike in CPU/memory), so they do not change the order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import msgspec

from extender.simulate.loopback import LoopbackClient

EXTENDER_WEIGHT = 5


@dataclass
class Outcome:
    node: str | None
    reason: str = ""  # why not placed (filter reasons sample or bind error)


class SchedulerDriver:
    def __init__(self, client: LoopbackClient, node_names: list[str], seed: int) -> None:
        self.client = client
        self.nodes = node_names
        self.rng = random.Random(seed)

    def _post(self, verb: str, body: dict[str, Any]) -> Any:
        return msgspec.json.decode(self.client.post(f"/{verb}", msgspec.json.encode(body)))

    def schedule(self, pod: dict[str, Any]) -> Outcome:
        meta = pod["metadata"]
        filtered = self._post("filter", {"Pod": pod, "NodeNames": self.nodes, "Nodes": None})
        if filtered.get("Error"):
            return Outcome(None, filtered["Error"])
        passing = filtered.get("NodeNames") or []
        if not passing:
            reasons = {
                **filtered.get("FailedNodes", {}),
                **filtered.get("FailedAndUnresolvableNodes", {}),
            }
            return Outcome(None, next(iter(reasons.values()), "no nodes"))
        node = passing[0] if len(passing) == 1 else self._best(pod, passing)
        bound = self._post(
            "bind",
            {
                "PodName": meta["name"],
                "PodNamespace": meta["namespace"],
                "PodUID": meta["uid"],
                "Node": node,
            },
        )
        if bound.get("Error"):
            return Outcome(None, bound["Error"])
        return Outcome(node)

    def _best(self, pod: dict[str, Any], passing: list[str]) -> str:
        scores = self._post("prioritize", {"Pod": pod, "NodeNames": passing, "Nodes": None})
        total = {s["Host"]: s["Score"] * EXTENDER_WEIGHT * 10 for s in scores}
        top = max(total.values())
        return self.rng.choice(sorted(n for n, v in total.items() if v == top))
