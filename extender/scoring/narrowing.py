"""Narrowing: the filter passes only the nodes the scheduler cannot get wrong.

kube-scheduler turns an extender score into ``score x weight x 10`` (an integer 0..10,
so nodes 0.05 apart in blended score tie), adds the in-tree plugins (NodeResourcesFit
LeastAllocated favours the emptiest node) and breaks ties at random (PROTOCOL.md 1.2).
That undoes fine orders such as FGD's. Narrowing decides in the filter instead:

    b(n)  = (w_p * (raw(n) - raw_min) / (raw_max - raw_min) + w_c * cost(n)) / (w_p + w_c)
            over the fitting nodes (exactly ``framework.priorities`` before x10 and rounding)
    pass  = {n fits : b(n) >= b_max - epsilon}  U  the ``keep`` best fitting nodes

It never passes fewer than min(keep, fitting) nodes and always keeps the best one, so a
pod that fits somewhere is never made unschedulable and preemption never runs because of
it. Pure function: no I/O, no state.
"""

from __future__ import annotations

from collections.abc import Mapping

from extender.scoring.framework import Evaluation, Weights, blended

EPSILON = 0.02  # in blended units (0..1); the scheduler's integer step is 0.1
KEEP = 1


def narrow(
    evals: Mapping[str, Evaluation],
    prices: Mapping[str, float | None],
    weights: Weights,
    epsilon: float = EPSILON,
    keep: int = KEEP,
) -> set[str]:
    """Names the filter should pass: fitting nodes within ``epsilon`` of the best blend, and
    at least the ``keep`` best (all fitting nodes when fewer). Empty only if none fits."""
    b = blended(evals, prices, weights)
    if not b:
        return set()
    top = max(b.values())
    passing = {name for name, v in b.items() if v >= top - epsilon}
    ranked = sorted(b, key=lambda name: -b[name])
    passing.update(ranked[: max(keep, 1)])
    return passing
