"""Request plans: a candidate list's evaluations for one pod shape, kept and patched.

kube-scheduler asks about the same candidates again and again: filter then prioritize
for every pod, replicas of one shape in a row. Between two asks only a few nodes change
(an agent report that moved the numbers, a bind, a release), so a plan re-evaluates just
those — the inventory's change log names them — instead of every node again. Nodes
that were unavailable are always re-checked (a stale agent may be back), and the whole
plan is rebuilt once the oldest report it relied on could have gone stale.

kube-scheduler's lists are permutations as often as repeats (its parallel filter
workers hand feasible nodes over in the order they finish), and prioritize asks about
the nodes filter passed: a list whose names are all in the last plan for the shape is
taken from it by name, not evaluated again.

A plan is columnar, like the evaluation behind it: per candidate whether it fits, its
raw policy score and $/GiB-h, and a reason for each one that does not fit. What callers
derive from a plan (the filter reply, the scores) is kept in ``derived`` and dropped
whenever any of that changes. Used from one thread (the event loop).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np

from extender.namelists import names_key, same_names
from extender.scoring.batch import Bools, Floats, Ints

# (reason, unresolvable) for a candidate that does not fit
Failure = tuple[str, bool]


@dataclass
class Outcome:
    """Evaluations of some candidates, in their order."""

    fits: Bools
    raw: Floats
    price: Floats  # $/GiB-h; NaN: unknown
    received: Floats  # report time relied on; NaN: the node was unavailable
    failures: dict[int, Failure]  # by position, for every candidate that does not fit


EvaluateNames = Callable[[list[str]], Outcome]


@dataclass
class Plan:
    names: list[str]
    fits: Bools
    raw: Floats
    price: Floats
    failures: dict[int, Failure]
    seq: int  # inventory change sequence the entries reflect
    fresh_until: float  # until then no available entry can have gone stale
    unavailable: Ints  # positions to re-check on every use
    index: dict[str, int] | None = None  # name -> position: see positions()
    passed: list[int] | None = None  # positions the filter passed: prioritize's likely ask
    derived: dict[str, object] = field(default_factory=dict)
    source: tuple[Plan, Ints] | None = None  # the plan this was taken from, and where

    def mark_passed(self, passing: list[int]) -> None:
        """Remember what filter passed, here and in the plan this one was taken from
        (prioritize's list is then found there without looking names up)."""
        self.passed = passing
        if self.source is not None:
            parent, at = self.source
            parent.passed = at[passing].tolist()

    def positions(self) -> dict[str, int]:
        """Name -> position, built on first use (a cold plan may never need it)."""
        if self.index is None:
            self.index = {name: i for i, name in enumerate(self.names)}
        return self.index

    @staticmethod
    def of(names: list[str], seq: int, outcome: Outcome, stale_after: float) -> Plan:
        received = outcome.received[~np.isnan(outcome.received)]
        return Plan(
            names=names,
            fits=outcome.fits,
            raw=outcome.raw,
            price=outcome.price,
            failures=outcome.failures,
            seq=seq,
            fresh_until=float(received.min()) + stale_after if received.size else np.inf,
            unavailable=np.flatnonzero(np.isnan(outcome.received)),
        )


class Plans:
    def __init__(self, capacity: int = 16) -> None:
        self._plans: OrderedDict[Hashable, Plan] = OrderedDict()
        self._capacity = capacity
        self._last: dict[Hashable, Plan] = {}  # per shape, the plan used last

    def plan(
        self,
        names: list[str],
        shape: Hashable,
        now: float,
        seq: int,
        changed_since: Callable[[int], set[str] | None],
        evaluate: EvaluateNames,
        stale_after: float,
    ) -> Plan:
        key = (shape, names_key(names))
        plan = self._plans.get(key)
        if plan is None or not same_names(plan.names, names) or now > plan.fresh_until:
            parent = self._last.get(shape)
            plan = None
            if parent is not None and len(parent.names) >= len(names) and self._current(
                parent, now, seq, changed_since, evaluate, stale_after
            ):
                plan = _subset(parent, names)  # prioritize after filter; a permutation
            if plan is None:
                plan = self._evaluated(names, shape, seq, evaluate, stale_after)
            self._plans[key] = plan
            while len(self._plans) > self._capacity:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
            if not self._current(plan, now, seq, changed_since, evaluate, stale_after):
                plan = self._plans[key] = self._evaluated(
                    names, shape, seq, evaluate, stale_after)
        return plan

    def _evaluated(self, names: list[str], shape: Hashable, seq: int, evaluate: EvaluateNames,
                   stale_after: float) -> Plan:
        """A plan evaluated afresh; the widest becomes the shape's parent (plans taken
        from it do not: it keeps its name index for the next permutation)."""
        plan = Plan.of(names, seq, evaluate(names), stale_after)
        if len(names) >= len(self._last.get(shape, plan).names):
            self._last[shape] = plan
        return plan

    @staticmethod
    def _current(
        plan: Plan,
        now: float,
        seq: int,
        changed_since: Callable[[int], set[str] | None],
        evaluate: EvaluateNames,
        stale_after: float,
    ) -> bool:
        """Brings the plan up to date; False if it cannot be (it must be rebuilt)."""
        if now > plan.fresh_until:
            return False
        changed = changed_since(plan.seq)
        if changed is None:  # the change log no longer reaches back that far
            return False
        _patch(plan, changed, seq, evaluate, stale_after)
        return True


def _subset(parent: Plan, names: list[str]) -> Plan | None:
    """The plan for some (or all, in another order) of the parent's candidates, taken
    from it by name, or None if a name is not among them."""
    found = parent.passed
    if found is None or len(found) != len(names) or any(
        parent.names[p] != n for p, n in zip(found, names, strict=True)
    ):  # not the filter's passing set: look the names up (building the index once)
        index = parent.positions()
        try:  # one C call for thousands of lookups (the names are new strings: hashed)
            found = list(itemgetter(*names)(index)) if len(names) > 1 else [
                index[n] for n in names]
        except KeyError:
            return None
    at = np.array(found, dtype=np.int64)
    back = np.full(len(parent.names), -1, dtype=np.int64)  # parent position -> ours
    back[at] = np.arange(len(at))
    return Plan(
        names=list(names),
        fits=parent.fits[at],
        raw=parent.raw[at],
        price=parent.price[at],
        failures={int(back[p]): f for p, f in parent.failures.items() if back[p] >= 0},
        seq=parent.seq,
        fresh_until=parent.fresh_until,
        unavailable=np.flatnonzero(np.isin(at, parent.unavailable)),
        source=(parent, at),
    )


def _patch(
    plan: Plan, changed: set[str], seq: int, evaluate: EvaluateNames, stale_after: float
) -> None:
    plan.seq = seq
    if not changed and not plan.unavailable.size:
        return
    index = plan.positions()
    positions = {index[n] for n in changed if n in index}
    positions.update(plan.unavailable.tolist())
    if not positions:
        return
    redo = np.array(sorted(positions), dtype=np.int64)
    new = evaluate([plan.names[i] for i in redo.tolist()])
    failures = {int(redo[k]): f for k, f in new.failures.items()}
    if (
        not np.array_equal(plan.fits[redo], new.fits)
        or not np.array_equal(plan.raw[redo], new.raw)
        or not np.array_equal(plan.price[redo], new.price, equal_nan=True)
        or any(plan.failures.get(i) != failures.get(i) for i in redo.tolist())
    ):
        plan.derived.clear()
    plan.fits[redo], plan.raw[redo], plan.price[redo] = new.fits, new.raw, new.price
    for i in redo.tolist():
        plan.failures.pop(i, None)
    plan.failures.update(failures)
    down = np.isnan(new.received)
    plan.unavailable = redo[down]  # every position unavailable before was in redo
    if (~down).any():
        plan.fresh_until = min(plan.fresh_until, float(new.received[~down].min()) + stale_after)
