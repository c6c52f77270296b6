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

import numpy as np

from extender.scoring.batch import Ints
from extender.scoring.compiled import kernel, warms
from extender.scoring.cost import Floats
from extender.scoring.framework import (
    Bools,
    Evaluation,
    Weights,
    as_arrays,
    blend_kernel,
    blended_array,
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


@kernel
def _within(b: Floats, epsilon: float) -> Bools:
    """b(n) >= b_max - epsilon, NaN never: one compiled pass for the max, one for the
    mask (the filter does this over every candidate after every change)."""
    best = -np.inf
    for v in b:
        if v > best:  # NaN compares False
            best = v
    mask = np.zeros(len(b), dtype=np.bool_)
    for i in range(len(b)):
        mask[i] = b[i] >= best - epsilon
    return mask


def passing(
    raw: Floats,
    fits: Bools,
    prices: Floats,
    weights: Weights,
    epsilon: float = EPSILON,
    keep: int = KEEP,
) -> Ints:
    """Positions the filter passes, ascending: ``narrow_mask`` of ``blended_array``. With
    the default ``keep`` one compiled call (the filter does this over every candidate
    after every report round; as four calls it cost twice as much)."""
    if keep == 1:
        return _passing(
            raw, fits, prices, float(weights.policy), float(weights.cost), float(epsilon)
        )
    return np.flatnonzero(narrow_mask(blended_array(raw, fits, prices, weights), epsilon, keep))


@kernel
def _passing(
    raw: Floats, fits: Bools, prices: Floats, w_policy: float, w_cost: float, epsilon: float
) -> Ints:
    mask = _within(blend_kernel(raw, fits, prices, w_policy, w_cost), epsilon)
    out = np.empty(int(mask.sum()), dtype=np.int64)
    k = 0
    for i in range(len(mask)):
        if mask[i]:
            out[k] = i
            k += 1
    return out


@warms
def _warm_up() -> None:
    narrow_mask(np.array([0.5, np.nan]))
    passing(np.zeros(2), np.ones(2, dtype=bool), np.zeros(2), Weights())


def narrow(
    evals: Mapping[str, Evaluation],
    prices: Mapping[str, float | None],
    weights: Weights,
    epsilon: float = EPSILON,
    keep: int = KEEP,
) -> set[str]:
    """Names the filter should pass (``narrow_mask`` by name). Empty only if none fits."""
    names = list(evals)
    raw, fits, price = as_arrays([evals[n] for n in names], [prices.get(n) for n in names])
    return {names[i] for i in passing(raw, fits, price, weights, epsilon, keep).tolist()}
