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
taken from it by the names' ids (``namebytes``: one array lookup), not evaluated again.

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

from extender.namebytes import NameIndex
from extender.namelists import name_ids, names_key, same_names
from extender.scoring.batch import Bools, Floats, Ints
from extender.scoring.compiled import kernel, warms

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
    derived: dict[str, object] = field(default_factory=dict)
    source: tuple[Plan, Ints] | None = None  # the plan this was taken from, and where
    _where: tuple[object, Ints | None] | None = None  # see where()

    def permutes(self) -> tuple[Plan, Ints] | None:
        """The plan this one lists every candidate of in another order, and where each of
        ours is in it; None if this one is not such a reordering."""
        if self.source is not None and len(self.names) == len(self.source[0].names):
            return self.source
        return None

    def positions(self) -> dict[str, int]:
        """Name -> position, built on first use (a cold plan may never need it)."""
        if self.index is None:
            self.index = {name: i for i, name in enumerate(self.names)}
        return self.index

    def where(self, index: NameIndex) -> Ints | None:
        """Name id -> position (-1: not a candidate here; ids added to the index since
        are beyond its end), built on first use; None if a name has no id."""
        if self._where is None or self._where[0] is not index.token:
            ids = name_ids(index, self.names)
            where = None
            if ids is not None:
                where = np.full(index.count, -1, dtype=np.int64)
                where[ids] = np.arange(len(ids))
            self._where = (index.token, where)
        return self._where[1]

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
    def __init__(self, names: NameIndex, capacity: int = 16) -> None:
        self._names = names
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
                plan = _subset(parent, names, self._names)  # a permutation, a part
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


def _subset(parent: Plan, names: list[str], index: NameIndex) -> Plan | None:
    """The plan for some (or all, in another order) of the parent's candidates, taken
    from it by the names' ids, or None if a name is not among them (or listed twice)."""
    ids, where = name_ids(index, names), parent.where(index)
    if ids is None or where is None:
        return None
    at = np.empty(len(ids), dtype=np.int64)
    if not _positions(where, ids, at):
        return None
    failures = {}
    if parent.failures:
        back = np.full(len(parent.names), -1, dtype=np.int64)  # parent position -> ours
        back[at] = np.arange(len(at))
        failures = {int(back[p]): f for p, f in parent.failures.items() if back[p] >= 0}
    down = parent.unavailable
    return Plan(
        names=names,
        fits=parent.fits[at],
        raw=parent.raw[at],
        price=parent.price[at],
        failures=failures,
        seq=parent.seq,
        fresh_until=parent.fresh_until,
        unavailable=np.flatnonzero(np.isin(at, down)) if down.size else down,
        source=(parent, at),
    )


@kernel
def _positions(where: Ints, ids: Ints, at: Ints) -> bool:
    """Each id's position in the plan, into ``at``; False if one is not there or two
    ids share one."""
    taken = np.zeros(len(where), dtype=np.bool_)
    for k in range(len(ids)):
        i = ids[k]
        if i >= len(where) or where[i] < 0 or taken[where[i]]:
            return False
        at[k] = where[i]
        taken[where[i]] = True
    return True


@warms
def _compile() -> None:
    _positions(np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64))


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
        plan.source = None  # its answers are its own now, not the parent's reordered
    plan.fits[redo], plan.raw[redo], plan.price[redo] = new.fits, new.raw, new.price
    for i in redo.tolist():
        plan.failures.pop(i, None)
    plan.failures.update(failures)
    down = np.isnan(new.received)
    plan.unavailable = redo[down]  # every position unavailable before was in redo
    if (~down).any():
        plan.fresh_until = min(plan.fresh_until, float(new.received[~down].min()) + stale_after)
