"""The replies made from a plan, kept with it under typed fields.

A plan is one pod shape's evaluation of one candidate list; the filter reply and the
prioritize scores follow from it alone, so they are made once and kept beside it
(as kube-scheduler keeps a pre-filter state under a typed key for its filter and
score steps), and dropped together with it whenever an entry of the plan changes
(``plans._patch``). A repeat of the same question costs a lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from extender.scoring import Weights
from extender.scoring.batch import Ints
from extender.scoring.framework import priority_array
from extender.scoring.narrowing import passing as narrowed
from extender.wire.names import Priorities, passing_names
from extender.wire.protocol import ExtenderFilterResult

if TYPE_CHECKING:
    from extender.scheduling.plans import Plan


@dataclass(frozen=True)
class FilterReply:
    """The filter's answer: the passing candidates' positions (an array: a list of
    hundreds of ints costs as much to free as to make) and the reply itself, with a
    reason for each candidate that does not fit."""

    passing: Ints
    result: ExtenderFilterResult


@dataclass
class Replies:
    """What has been answered from one plan so far; empty until asked."""

    filter: FilterReply | None = None
    decided: FilterReply | None = None  # the filter's answer when it decides: one node
    priorities: Priorities | None = None
    passing: Priorities | None = None  # the scores of the nodes the filter passed

    def clear(self) -> None:
        self.filter = None
        self.decided = None
        self.priorities = None
        self.passing = None


def filter_reply(
    plan: Plan, epsilon: float | None, weights: Weights, decide: bool = False
) -> FilterReply:
    """The plan's filter reply, made once. With narrowing (``epsilon``, device-plugin
    asks) only the nodes the policy and cost put on top pass (docs/scheduling.md); the
    others fit, so they get no failure reason (kube-scheduler only shows reasons when
    nothing passes, and narrowing never passes nothing when something fits). With
    ``decide`` as well, only the best of them passes (``narrowing.passing``)."""
    if decide and epsilon is not None:
        if plan.replies.decided is None:
            passing = narrowed(plan.raw, plan.fits, plan.price, weights, decide=True)
            plan.replies.decided = _reply(plan, passing)
        return plan.replies.decided
    if plan.replies.filter is None:
        if epsilon is not None:
            passing = narrowed(plan.raw, plan.fits, plan.price, weights, epsilon)
        else:
            passing = np.flatnonzero(plan.fits)
        plan.replies.filter = _reply(plan, passing)
    return plan.replies.filter


def _reply(plan: Plan, passing: Ints) -> FilterReply:
    result = failed(plan)
    result.NodeNames = passing_names(plan.names, passing)
    return FilterReply(passing, result)


def priorities(plan: Plan, weights: Weights) -> Priorities:
    """The plan's prioritize reply, made once: every candidate's integer score, blended
    over the candidates (a node that does not fit scores 0)."""
    if plan.replies.priorities is None:
        scores = priority_array(plan.raw, plan.fits, plan.price, weights)
        plan.replies.priorities = Priorities(plan.names, scores)
    return plan.replies.priorities


def passing_priorities(plan: Plan, reply: FilterReply, weights: Weights) -> Priorities:
    """prioritize's reply for the nodes the plan's filter passed (what kube-scheduler
    asks next), made once from the plan's own arrays: blended among themselves, as a
    plan of just those nodes would score them, without one being made."""
    if plan.replies.passing is None:
        names = reply.result.NodeNames or []
        scores = priority_array(plan.raw, plan.fits, plan.price, weights, reply.passing)
        plan.replies.passing = Priorities(names, scores)
    return plan.replies.passing


def failed(plan: Plan) -> ExtenderFilterResult:
    """A filter result with every failed candidate's reason, in the candidates' order."""
    result = ExtenderFilterResult()
    for i in sorted(plan.failures):
        reason, unresolvable = plan.failures[i]
        failures = result.FailedAndUnresolvableNodes if unresolvable else result.FailedNodes
        failures[plan.names[i]] = reason
    return result
