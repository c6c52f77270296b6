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

from extender.scoring.cost import cost_terms
from extender.scoring.framework import Evaluation, Weights

EPSILON = 0.02  # in blended units (0..1); the scheduler's integer step is 0.1
KEEP = 1


def blended(
    evals: Mapping[str, Evaluation], prices: Mapping[str, float | None], weights: Weights
) -> dict[str, float]:
    """b(n) in 0..1 for each fitting node: the policy and cost blend ``priorities`` rounds."""
    fit = {name: e.raw for name, e in evals.items() if e.fits}
    if not fit:
        return {}
    lo, hi = min(fit.values()), max(fit.values())
    cost = cost_terms({name: prices.get(name) for name in fit})
    total_w = weights.policy + weights.cost
    out: dict[str, float] = {}
    for name, raw in fit.items():
        pol = (raw - lo) / (hi - lo) if hi > lo else 1.0
        out[name] = (weights.policy * pol + weights.cost * cost[name]) / total_w
    return out


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
