"""Request plans: a candidate list's evaluations for one pod shape, kept and patched.

kube-scheduler asks about the same candidates again and again: filter then prioritize
for every pod, replicas of one shape in a row. Between two asks only a few nodes change
(an agent report that moved the numbers, a bind, a release), so a plan re-evaluates just
those instead of every node again. It keeps each candidate's row in the inventory's
columns, and each row carries the change number of its last write, so what changed is
one pass over those numbers (no names looked up); when nodes come or go, rows move and
the plan is rebuilt. Nodes
that were unavailable are always re-checked (a stale agent may be back), and the whole
plan is rebuilt once the oldest report it relied on could have gone stale.

kube-scheduler's lists are permutations as often as repeats (its parallel filter
workers hand feasible nodes over in the order they finish): the HTTP edge's decoder
hands a permutation of a list it kept over as that very list (its fingerprint), so a
plan is found by the list's key and nothing here depends on the order.

A plan is columnar, like the evaluation behind it: per candidate whether it fits, its
raw policy score and $/GiB-h, and a reason for each one that does not fit. The replies
made from a plan (``replies.Replies``: the filter reply, the scores) are kept with it
and dropped whenever any of that changes. Used from one thread (the event loop).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from extender.scheduling.replies import Replies
from extender.scoring.batch import Bools, Floats, Ints
from extender.wire.names import names_key, picked, same_names

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
    rows: Ints  # each candidate's row in the inventory's columns (-1: none) ...
    layout: int  # ... valid while the columns' layout is this


# Evaluates candidates by name, with their rows when known (a plan's, still valid)
Evaluate = Callable[[Sequence[str], Ints | None], Outcome]
# Positions of a plan whose nodes changed since it was made; None: it must be rebuilt
Changed = Callable[["Plan"], Ints | None]
# Each named node's row in the inventory's columns (-1: none)
Rows = Callable[[Sequence[str]], Ints]
_NONE = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Source:
    """What plans are made and brought up to date from, as of one request: the time,
    the inventory's change number, which positions of a plan changed since it was made,
    how nodes are evaluated (for the shape asked about), how long a report stays fresh,
    and how to find named nodes' rows (None: a plan is never taken from a wider one)."""

    now: float
    seq: int
    changed: Changed
    evaluate: Evaluate
    stale_after: float
    rows: Rows | None = None


@dataclass
class Plan:
    names: Sequence[str]
    fits: Bools
    raw: Floats
    price: Floats
    failures: dict[int, Failure]
    seq: int  # inventory change sequence the entries reflect
    fresh_until: float  # until then no available entry can have gone stale
    unavailable: Ints  # positions to re-check on every use
    rows: Ints  # see Outcome
    layout: int
    replies: Replies = field(default_factory=Replies)
    # a shape's widest plan: whether its shape's latest filter asked for it (see parent)
    asked: bool = True

    @staticmethod
    def of(names: Sequence[str], seq: int, outcome: Outcome, stale_after: float) -> Plan:
        earliest, unavailable = _received(outcome.received)
        return Plan(
            names=names,
            fits=outcome.fits,
            raw=outcome.raw,
            price=outcome.price,
            failures=outcome.failures,
            seq=seq,
            fresh_until=earliest + stale_after,
            unavailable=unavailable,
            rows=outcome.rows,
            layout=outcome.layout,
        )


class Plans:
    def __init__(self, capacity: int = 16) -> None:
        self._plans: OrderedDict[Hashable, Plan] = OrderedDict()
        self._capacity = capacity
        self.passes = 0  # plans evaluated afresh (every candidate), ever
        # per shape, its widest plan (refreshed off the cycle: see parent); as many
        # shapes as plans are kept: the shapes change for good (a new workload-mix
        # version is part of each), and each of these holds a whole candidate list's arrays
        self._last: OrderedDict[Hashable, Plan] = OrderedDict()

    def plan(self, names: Sequence[str], shape: Hashable, src: Source) -> Plan:
        """The plan for ``names``: kept and brought up to date, taken from the shape's
        widest plan when that lists them all, or evaluated afresh."""
        key = (shape, names_key(names))
        plan = self._plans.get(key)
        if plan is None or not same_names(plan.names, names) or src.now > plan.fresh_until:
            plan = self._within(names, shape, src)
            if plan is None:
                plan = self._evaluated(names, shape, src)
            self._plans[key] = plan
            while len(self._plans) > self._capacity:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
            if not self._current(plan, src):
                plan = self._plans[key] = self._evaluated(names, shape, src)
        parent = self._last.get(shape)
        if parent is not None:
            parent.asked = parent is plan
        return plan

    def parent(self, shape: Hashable, src: Source, asked: bool = False) -> Plan | None:
        """The shape's widest plan, brought up to date (``hotshapes``: refreshed after a
        report or a bind, off the cycle); None if there is none or it must be rebuilt.

        ``asked``: None too unless the shape's latest filter asked for it. A draining
        backlog's lists shrink as nodes fill, so its widest plan is never asked for
        again; refreshing it after every bind was 13 % of the event loop's samples in
        bench/throughput.py, for answers nothing read. A filter that asks for it again
        patches it itself."""
        parent = self._last.get(shape)
        if parent is None or (asked and not parent.asked):
            return None
        if not self._current(parent, src):
            return None
        self._last.move_to_end(shape)
        return parent

    def _within(self, names: Sequence[str], shape: Hashable, src: Source) -> Plan | None:
        """A shorter list whose nodes the shape's widest plan all lists, that plan
        brought up to date, as a plan of its own with no pass: kube-scheduler's list once
        a node has filled up (its GPUs counted as requested), the plan made ahead for
        the list before (``announced``). Exact: a node's entries depend on that node
        alone; the list as a whole matters only to the replies, made afresh from it.
        None when there is no such plan."""
        parent = self._last.get(shape)
        if src.rows is None or parent is None or len(names) >= len(parent.names):
            return None
        if not self._current(parent, src):
            return None
        at = src.rows(names)
        if not at.size or int(at.min()) < 0:
            return None
        where = np.full(max(int(at.max()), int(parent.rows.max())) + 1, -1, np.int64)
        where[parent.rows[parent.rows >= 0]] = np.flatnonzero(parent.rows >= 0)
        pos = where[at]
        if int(pos.min()) < 0:
            return None
        fits = parent.fits[pos]
        failing = np.flatnonzero(~fits).tolist()
        down = np.zeros(len(parent.names), bool)
        down[parent.unavailable] = True
        return Plan(
            names=names,
            fits=fits,
            raw=parent.raw[pos],
            price=parent.price[pos],
            failures={
                i: parent.failures[p] for i, p in zip(failing, pos[failing].tolist(), strict=True)
            },
            seq=parent.seq,
            fresh_until=parent.fresh_until,
            unavailable=np.flatnonzero(down[pos]),
            rows=at,
            layout=parent.layout,
        )

    def _evaluated(self, names: Sequence[str], shape: Hashable, src: Source) -> Plan:
        """A plan evaluated afresh; the widest becomes the shape's parent."""
        plan = Plan.of(names, src.seq, src.evaluate(names, None), src.stale_after)
        self.passes += 1
        if len(names) >= len(self._last.get(shape, plan).names):
            self._last[shape] = plan
            self._last.move_to_end(shape)
            while len(self._last) > self._capacity:
                self._last.popitem(last=False)
        return plan

    @staticmethod
    def _current(plan: Plan, src: Source) -> bool:
        """Brings the plan up to date; False if it cannot be (it must be rebuilt)."""
        if src.now > plan.fresh_until:
            return False
        # nothing written since (every write, a node's arrival or departure too, takes a
        # new change number): no pass over the stamps
        redo = _NONE if plan.seq == src.seq else src.changed(plan)
        if redo is None:  # nodes came or went: its rows are void
            return False
        _patch(plan, redo, src)
        return True


def _received(received: Floats) -> tuple[float, Ints]:
    """The earliest report time relied on (inf if none) and the positions of the nodes
    that were unavailable (NaN)."""
    down = np.isnan(received)
    return float(np.fmin.reduce(received, initial=np.inf)), np.flatnonzero(down)


def _patch(plan: Plan, changed: Ints, src: Source) -> None:
    """Re-evaluates the changed positions (ascending) and every unavailable one."""
    plan.seq = src.seq
    redo = np.union1d(changed, plan.unavailable) if plan.unavailable.size else changed
    if not redo.size:
        return
    new = src.evaluate(picked(plan.names, redo.tolist()), plan.rows[redo])
    differs, earliest, failing, down = _merge(
        plan.fits, plan.raw, plan.price, redo, new.fits, new.raw, new.price, new.received
    )
    for k in failing.tolist():  # a reason exactly where a node does not fit
        i, reason = int(redo[k]), new.failures.get(k)
        if plan.failures.get(i) != reason:
            differs = True
            if reason is None:
                del plan.failures[i]
            else:
                plan.failures[i] = reason
    if differs:
        plan.replies.clear()
    plan.unavailable = down  # every one unavailable before is in redo
    plan.fresh_until = min(plan.fresh_until, earliest + src.stale_after)


def _merge(
    fits: Bools,
    raw: Floats,
    price: Floats,
    redo: Ints,
    new_fits: Bools,
    new_raw: Floats,
    new_price: Floats,
    new_received: Floats,
) -> tuple[bool, float, Ints, Ints]:
    """Writes the re-evaluated entries at ``redo`` (ascending, distinct). Returns whether
    any differed (NaN prices equal), the earliest report time among them (inf if none
    was available), which of them did not fit before or do not now (indices into
    ``redo``: only those can have a failure reason to change), and the plan positions
    now unavailable."""
    old_fits, old_price = fits[redo], price[redo]
    same_price = (old_price == new_price) | (np.isnan(old_price) & np.isnan(new_price))
    differs = bool(
        (old_fits != new_fits).any() or (raw[redo] != new_raw).any() or not same_price.all()
    )
    failing = np.flatnonzero(~old_fits | ~new_fits)
    fits[redo], raw[redo], price[redo] = new_fits, new_raw, new_price
    earliest, down = _received(new_received)
    return differs, earliest, failing, redo[down]
