"""The one place that walks nodes and calls a policy (kube-scheduler's Filter + Score).

evaluate(): capacity-type rule -> fitting GPUs -> policy.place (place()) -> policy.score (raw)
priorities(): raw scores min-max normalised over the fitting nodes, blended with the
cost term, as integers 0..10 (the extender protocol's range; the scheduler multiplies
by weight x 10 and does not clamp, so we never exceed 10).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from extender.scoring import kernel  # compiled from kernel.c when the package is built
from extender.scoring.batch import GpuBatch, Ints, contiguous, host_fits
from extender.scoring.cost import Floats
from extender.scoring.fit import fitting_gpus, shortfall_reason
from extender.scoring.model import MAX_PRIORITY, CapacityPref, GpuDemand, GpuView, NodeView
from extender.scoring.policy import Context, NodePolicy, Policy, RowEvaluator

SPOT = "spot"
Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Evaluation:
    fits: bool
    reason: str = ""
    unresolvable: bool = False  # preemption on this node cannot help
    chosen: tuple[GpuView, ...] = ()
    raw: float = 0.0


@dataclass(frozen=True, slots=True)
class Weights:
    policy: float = 1.0
    cost: float = 1.0


def capacity_reason(node: NodeView, demand: GpuDemand) -> str:
    """Why the pod's capacity-type rule forbids this node, or "" if it allows it."""
    is_spot = node.capacity_type == SPOT
    if demand.capacity is CapacityPref.ON_DEMAND and is_spot:
        return "pod must not run on spot capacity (capacity-type on-demand / do-not-disrupt)"
    if demand.capacity is CapacityPref.SPOT and not is_spot:
        return f"pod asks for spot capacity; node is {node.capacity_type or 'of unknown type'}"
    return ""


def evaluate(node: NodeView, demand: GpuDemand, policy: NodePolicy, ctx: Context) -> Evaluation:
    ev = place(node, demand, policy, ctx)
    if not ev.fits:
        return ev
    return Evaluation(True, chosen=ev.chosen, raw=policy.score(node, demand, ev.chosen, ctx))


def place(node: NodeView, demand: GpuDemand, policy: NodePolicy, ctx: Context) -> Evaluation:
    """``evaluate`` without the score (``raw`` stays 0): whether the pod fits and the
    GPUs it takes. Bind needs no more, and the score is most of a node's evaluation."""
    rule = capacity_reason(node, demand)
    if rule:
        return Evaluation(False, rule, unresolvable=True)
    short = node.host_room(demand.cpu_milli, demand.host_memory_mib)
    if short:  # NodeResourcesFit's verdict too: the plan must not pass what it refuses
        return Evaluation(False, short)
    fitting = fitting_gpus(node, demand, ctx.limits)
    if len(fitting) < demand.count:
        reason = shortfall_reason(node, demand, ctx.limits, len(fitting))
        return Evaluation(False, reason, unresolvable=_never_fits(node, demand, ctx))
    return Evaluation(True, chosen=policy.place(node, demand, fitting, ctx))


def evaluate_batch(
    batch: GpuBatch, demand: GpuDemand, policy: Policy, ctx: Context
) -> tuple[Bools, Floats]:
    """``evaluate`` for every row at once, for plain (non-MIG) demands: whether the node
    fits and its raw score (0 where it does not fit). Reasons for the nodes that do not
    fit come from ``evaluate`` on those nodes alone."""
    if demand.capacity is CapacityPref.ON_DEMAND:
        allowed = ~batch.spot
    elif demand.capacity is CapacityPref.SPOT:
        allowed = batch.spot
    else:
        allowed = np.ones(len(batch), dtype=bool)
    hold = batch.can_hold(demand, ctx.limits)
    room = host_fits(batch, np.arange(len(batch)), demand)
    fits = allowed & room & (hold.sum(axis=0) >= demand.count)
    raw = np.zeros(len(batch))
    if fits.all():
        raw = policy.score_batch(batch, demand, hold, ctx)
    elif fits.any():
        at = np.flatnonzero(fits)
        raw[at] = policy.score_batch(batch.take(at), demand, hold.take(at, axis=1), ctx)
    return fits, raw


def evaluate_rows(
    batch: GpuBatch,
    rows: Ints,
    demand: GpuDemand,
    policy: Policy,
    ctx: Context,
    order: Ints | None = None,
) -> tuple[Bools, Floats]:
    """``evaluate_batch`` for these rows of the batch (-1: an unavailable node, which never
    fits), for plain demands. A policy with a vectorised evaluation reads them in place;
    for the others they are taken first. ``order``: positions that read the rows in
    ascending order (``NodeColumns.ascending``), read so and answered in ``rows``' order."""
    if order is not None:
        fits, raw = evaluate_rows(batch, rows[order], demand, policy, ctx)
        return _unsorted(order, fits, raw)
    if hasattr(policy, "evaluate_rows"):  # isinstance on a runtime Protocol: 3-10 us
        return cast(RowEvaluator, policy).evaluate_rows(batch, rows, demand, ctx)
    fits, raw = np.zeros(len(rows), dtype=bool), np.zeros(len(rows))
    at = np.flatnonzero(rows >= 0)
    if at.size:
        fits[at], raw[at] = evaluate_batch(batch.take(rows[at]), demand, policy, ctx)
    return fits, raw


def _unsorted(order: Ints, fits: Bools, raw: Floats) -> tuple[Bools, Floats]:
    """Results read in ``order`` put back where their rows were."""
    out_fits, out_raw = np.empty_like(fits), np.empty_like(raw)
    out_fits[order], out_raw[order] = fits, raw
    return out_fits, out_raw


def _never_fits(node: NodeView, demand: GpuDemand, ctx: Context) -> bool:
    """True when even an empty node could not host the pod (so preempting cannot help)."""
    if demand.mig_profile:
        kind = [g for g in node.gpus if g.mig_profile == demand.mig_profile]
        return len(kind) < demand.count
    plain = [g for g in node.gpus if not g.mig_profile]
    if demand.memory_mib is None:
        return len(plain) < demand.count
    big = [g for g in plain if g.total_mib - ctx.limits.margin_mib >= demand.memory_mib]
    return len(big) < demand.count


def blended_array(raw: Floats, fits: Bools, prices: Floats, weights: Weights) -> Floats:
    """b(n) in 0..1 for each node (NaN where it does not fit): the policy's raw score
    min-max normalised over the fitting nodes (all 1 when equal), blended with the cost
    term (``cost.cost_of`` over the fitting nodes) by the weights."""
    return blend(raw, fits, prices, float(weights.policy), float(weights.cost))


def blend(raw: Floats, fits: Bools, prices: Floats, w_policy: float, w_cost: float) -> Floats:
    """``blended_array`` with the weights as plain floats."""
    return blend_best(raw, fits, prices, w_policy, w_cost)[0]


def blend_best(
    raw: Floats, fits: Bools, prices: Floats, w_policy: float, w_cost: float
) -> tuple[Floats, int]:
    """``blend`` and the position of its best score, the first of equals (-1 when no node
    fits): one compiled pass (``kernel.blend``; tests/blend_reference.py is the NumPy
    oracle it is checked against, bit for bit)."""
    out = np.empty(raw.shape[0])
    arrays = contiguous(raw), contiguous(fits), contiguous(prices)
    best = kernel.blend(*arrays, w_policy, w_cost, out)
    return out, best


def as_arrays(
    evals: Sequence[Evaluation], prices: Sequence[float | None]
) -> tuple[Floats, Bools, Floats]:
    n = len(evals)
    raw = np.fromiter((e.raw for e in evals), dtype=float, count=n)
    fits = np.fromiter((e.fits for e in evals), dtype=bool, count=n)
    price = np.fromiter((np.nan if p is None else p for p in prices), dtype=float, count=n)
    return raw, fits, price


def blended(
    evals: Mapping[str, Evaluation], prices: Mapping[str, float | None], weights: Weights
) -> dict[str, float]:
    """``blended_array`` by node name, for the fitting nodes."""
    names = list(evals)
    raw, fits, price = as_arrays([evals[n] for n in names], [prices.get(n) for n in names])
    b = blended_array(raw, fits, price, weights)
    return {n: float(v) for n, v, ok in zip(names, b, fits, strict=True) if ok}


def priority_array(
    raw: Floats, fits: Bools, prices: Floats, weights: Weights, at: Ints | None = None
) -> Ints:
    """Integer 0..10 per node, round(10 * b(n)) (half to even, as Python's round); nodes
    that do not fit get 0. Of the nodes at positions ``at`` only, when given (the nodes a
    filter passed: blended among themselves)."""
    w_policy, w_cost = float(weights.policy), float(weights.cost)
    if at is not None:
        raw, fits, prices = raw[at], fits[at], prices[at]
    b = blend(raw, fits, prices, w_policy, w_cost)
    top = float(MAX_PRIORITY)
    out = np.zeros(raw.shape[0], dtype=np.int64)
    out[fits] = np.clip(np.rint(top * b[fits]), 0.0, top)  # rint: half to even
    return out


def priorities(
    evals: Mapping[str, Evaluation], prices: Mapping[str, float | None], weights: Weights
) -> dict[str, int]:
    """``priority_array`` by node name."""
    names = list(evals)
    raw, fits, price = as_arrays([evals[n] for n in names], [prices.get(n) for n in names])
    return dict(zip(names, priority_array(raw, fits, price, weights).tolist(), strict=True))
