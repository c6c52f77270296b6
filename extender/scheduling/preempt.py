"""preempt: which of kube-scheduler's candidate nodes evicting the victims would make
fit. Its own filter plugins chose the victims by CPU and memory; GPU memory is ours."""

from __future__ import annotations

from collections.abc import Iterable

from extender.scheduling.asks import Asks
from extender.scheduling.evaluate import Evaluator
from extender.scoring import place
from extender.scoring.model import NodeView
from extender.wire.clock import Clock
from extender.wire.protocol import (
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    MetaPod,
    MetaVictims,
)


def preempt(
    args: ExtenderPreemptionArgs, asks: Asks, evaluator: Evaluator, clock: Clock
) -> ExtenderPreemptionResult:
    """Keep only the candidate nodes where evicting the victims frees enough GPU."""
    if args.Pod is None:
        raise ValueError("request has no Pod")
    demand = asks.remember(args.Pod)
    victims = meta_victims(args)
    if not demand.wants_gpu or demand.count == 0:
        return ExtenderPreemptionResult(NodeNameToMetaVictims=victims)
    kept: dict[str, MetaVictims] = {}
    for node, v in victims.items():
        if evaluator.unavailable(node, clock.now()):
            continue
        view = view_without(evaluator, node, [p.UID for p in v.Pods])
        if view is not None and place(view, demand, evaluator.policy, evaluator.context()).fits:
            kept[node] = v
    return ExtenderPreemptionResult(NodeNameToMetaVictims=kept)


def view_without(evaluator: Evaluator, node: str, victim_uids: Iterable[str]) -> NodeView | None:
    """The node as it would be with the victims' GPU memory freed: their grants and what
    they were measured using (``Inventory.view_without``)."""
    return evaluator.inventory.view_without(node, list(victim_uids))


def meta_victims(args: ExtenderPreemptionArgs) -> dict[str, MetaVictims]:
    """The victims by UID, whichever form the scheduler sent them in."""
    if args.NodeNameToMetaVictims is not None:
        return dict(args.NodeNameToMetaVictims)
    return {
        node: MetaVictims(
            Pods=[MetaPod(UID=p.metadata.uid) for p in v.Pods], NumPDBViolations=v.NumPDBViolations
        )
        for node, v in (args.NodeNameToVictims or {}).items()
    }
