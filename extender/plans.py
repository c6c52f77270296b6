"""Request plans: a candidate list's evaluations for one pod shape, kept and patched.

kube-scheduler asks about the same candidates again and again: filter then prioritize
for every pod, replicas of one shape in a row. Between two asks only a few nodes change
(an agent report that moved the numbers, a bind, a release), so a plan re-evaluates just
those — the inventory's change log names them — instead of walking every node again.
Nodes that were unavailable are always re-checked (a stale agent may be back), and the
whole plan is rebuilt once the oldest report it relied on could have gone stale.

What callers derive from a plan (the filter reply, the scores) is kept in ``derived``
and dropped whenever any entry changes. Used from one thread (the event loop).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from extender.scoring.framework import Evaluation

# one node's outcome: evaluation, $/GiB-h, and the report time it relied on (None when
# the node was unavailable)
Entry = tuple[Evaluation, float | None, float | None]
EvaluateNodes = Callable[[list[str]], list[Entry]]


@dataclass
class Plan:
    names: list[str]
    evals: list[Evaluation]
    prices: list[float | None]
    seq: int  # inventory change sequence the entries reflect
    fresh_until: float  # until then no available entry can have gone stale
    unavailable: list[int]  # indices to re-check on every use
    index: dict[str, int] = field(default_factory=dict)
    derived: dict[str, object] = field(default_factory=dict)


class Plans:
    def __init__(self, capacity: int = 16) -> None:
        self._plans: OrderedDict[Hashable, Plan] = OrderedDict()
        self._capacity = capacity

    def plan(
        self,
        names: list[str],
        shape: Hashable,
        now: float,
        seq: int,
        changed_since: Callable[[int], set[str] | None],
        evaluate: EvaluateNodes,
        stale_after: float,
    ) -> Plan:
        key = (shape, len(names), hash(tuple(names)))
        plan = self._plans.get(key)
        if plan is None or plan.names != names or now > plan.fresh_until:
            plan = self._build(names, seq, evaluate, stale_after)
            self._plans[key] = plan
            while len(self._plans) > self._capacity:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
            changed = changed_since(plan.seq)
            if changed is None:  # the change log no longer reaches back that far
                plan = self._plans[key] = self._build(names, seq, evaluate, stale_after)
            else:
                self._patch(plan, changed, seq, evaluate, stale_after)
        return plan

    @staticmethod
    def _build(names: list[str], seq: int, evaluate: EvaluateNodes, stale_after: float) -> Plan:
        entries = evaluate(names)
        received = [r for _, _, r in entries if r is not None]
        return Plan(
            names=list(names),
            evals=[e for e, _, _ in entries],
            prices=[p for _, p, _ in entries],
            seq=seq,
            fresh_until=(min(received) if received else float("inf")) + stale_after,
            unavailable=[i for i, (_, _, r) in enumerate(entries) if r is None],
            index={name: i for i, name in enumerate(names)},
        )

    @staticmethod
    def _patch(
        plan: Plan, changed: set[str], seq: int, evaluate: EvaluateNodes, stale_after: float
    ) -> None:
        redo = sorted({plan.index[n] for n in changed if n in plan.index} | set(plan.unavailable))
        plan.seq = seq
        if not redo:
            return
        entries = evaluate([plan.names[i] for i in redo])
        unavailable = set(plan.unavailable) - set(redo)
        for i, (ev, price, received) in zip(redo, entries, strict=True):
            if ev != plan.evals[i] or price != plan.prices[i]:
                plan.derived.clear()
            plan.evals[i], plan.prices[i] = ev, price
            if received is None:
                unavailable.add(i)
            else:
                plan.fresh_until = min(plan.fresh_until, received + stale_after)
        plan.unavailable = sorted(unavailable)
