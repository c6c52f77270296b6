"""Narrowing: the filter passes only the nodes the scheduler cannot get wrong.

kube-scheduler turns an extender score into ``score x weight x 10`` (an integer 0..10,
so nodes 0.05 apart in blended score tie), adds the in-tree plugins (NodeResourcesFit
LeastAllocated favours the emptiest node) and breaks ties at random (docs/protocol.md §1.6).
That undoes fine orders such as FGD's. Narrowing decides in the filter instead:

    b(n)  = (w_p * (raw(n) - raw_min) / (raw_max - raw_min) + w_c * cost(n)) / (w_p + w_c)
            over the fitting nodes (exactly ``framework.priorities`` before x10 and rounding)
    pass  = {n fits : b(n) >= b_max - epsilon}  U  the ``keep`` best fitting nodes

It never passes fewer than min(keep, fitting) nodes and always keeps the best one, so a
pod that fits somewhere is never made unschedulable and preemption never runs because of
it.

Deciding goes one step further: the filter passes only the best node (the first of
equals, in candidate order). kube-scheduler takes a node that passes alone without
scoring (docs/protocol.md §1.5), so the pod costs it no prioritize call and no in-tree
scores: what the extender would pick is bound. The service decides for pods that state
no preference of their own (``extender.state.demand.states_preferences``). Pure
functions: no I/O, no state.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from extender.scoring.batch import Ints
from extender.scoring.cost import Floats
from extender.scoring.framework import (
    Bools,
    Evaluation,
    Weights,
    as_arrays,
    blend_best,
)
from extender.scoring.framework import blended as blended

EPSILON = 0.02  # in blended units (0..1); the scheduler's integer step is 0.1
KEEP = 1


def narrow_mask(b: Floats, epsilon: float = EPSILON, keep: int = KEEP) -> Bools:
    """Which nodes the filter passes, given ``blended_array`` (NaN = does not fit): those
    within ``epsilon`` of the best, and at least the ``keep`` best (stable order)."""
    mask = _within(b, float(epsilon))
    if keep > 1:
        fits = ~np.isnan(b)
        order = np.argsort(np.where(fits, -b, np.inf), kind="stable")
        mask[order[: min(keep, int(fits.sum()))]] = True
    return mask


def _within(b: Floats, epsilon: float) -> Bools:
    """b(n) >= b_max - epsilon, NaN never."""
    best = np.fmax.reduce(b, initial=-np.inf)  # fmax: NaN ignored
    return b >= best - epsilon


def passing(
    raw: Floats,
    fits: Bools,
    prices: Floats,
    weights: Weights,
    epsilon: float = EPSILON,
    keep: int = KEEP,
    decide: bool = False,
) -> Ints:
    """Positions the filter passes, ascending: ``narrow_mask`` of ``blended_array``, or,
    when the filter decides, its best node alone: the highest b(n), the first of equals
    in candidate order (``framework.blend_best``); none when nothing fits."""
    b, best = blend_best(raw, fits, prices, float(weights.policy), float(weights.cost))
    if decide:
        return np.array([best] if best >= 0 else [], dtype=np.int64)
    return np.flatnonzero(narrow_mask(b, epsilon, keep))


def narrow(
    evals: Mapping[str, Evaluation],
    prices: Mapping[str, float | None],
    weights: Weights,
    epsilon: float = EPSILON,
    keep: int = KEEP,
    decide: bool = False,
) -> set[str]:
    """Names the filter should pass (``passing`` by name). Empty only if none fits."""
    names = list(evals)
    raw, fits, price = as_arrays([evals[n] for n in names], [prices.get(n) for n in names])
    chosen = passing(raw, fits, price, weights, epsilon, keep, decide)
    return {names[i] for i in chosen.tolist()}
