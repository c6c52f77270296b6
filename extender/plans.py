"""Request plans: a candidate list's evaluations for one pod shape, kept and patched.

kube-scheduler asks about the same candidates again and again: filter then prioritize
for every pod, replicas of one shape in a row. Between two asks only a few nodes change
(an agent report that moved the numbers, a bind, a release), so a plan re-evaluates just
those — the inventory's change log names them — instead of every node again. Nodes
that were unavailable are always re-checked (a stale agent may be back), and the whole
plan is rebuilt once the oldest report it relied on could have gone stale.

A plan is columnar, like the evaluation behind it: per candidate whether it fits, its
raw policy score and $/GiB-h, and a reason for each one that does not fit. What callers
derive from a plan (the filter reply, the scores) is kept in ``derived`` and dropped
whenever any of that changes. Used from one thread (the event loop).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

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
            if parent is not None and len(parent.names) > len(names) and self._current(
                parent, now, seq, changed_since, evaluate, stale_after
            ):
                plan = _subset(parent, names)  # prioritize, after filter
            if plan is None:
                plan = Plan.of(names, seq, evaluate(names), stale_after)
            self._plans[key] = plan
            while len(self._plans) > self._capacity:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
            if not self._current(plan, now, seq, changed_since, evaluate, stale_after):
                plan = self._plans[key] = Plan.of(names, seq, evaluate(names), stale_after)
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
    """The plan for some of the parent's candidates, taken from it (kube-scheduler
    sends prioritize the nodes filter passed), or None if a name is not among them."""
    found = parent.passed
    if found is None or len(found) != len(names) or any(
        parent.names[p] != n for p, n in zip(found, names, strict=True)
    ):  # not the filter's passing set: look the names up (building the index once)
        index = parent.positions()
        found = [index.get(n, -1) for n in names]
        if -1 in found:
            return None
    at = np.array(found, dtype=np.int64)
    back = {p: i for i, p in enumerate(found)}
    down = set(parent.unavailable.tolist())
    return Plan(
        names=list(names),
        fits=parent.fits[at],
        raw=parent.raw[at],
        price=parent.price[at],
        failures={back[p]: f for p, f in parent.failures.items() if p in back},
        seq=parent.seq,
        fresh_until=parent.fresh_until,
        unavailable=np.array([i for i, p in enumerate(found) if p in down], dtype=np.int64),
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
