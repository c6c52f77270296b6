"""Answers for candidates already answered, listed in another order.

kube-scheduler's parallel filter workers hand feasible nodes over in the order they
finish, so for pod after pod of one shape the extender's filter gets the same candidates
permuted, and prioritize then gets the nodes the filter passed, permuted the same way.
Neither answer depends on the order: a candidate passes or not by itself (narrowing
passes every node within epsilon of the best of the set) and a score is normalised over
the set. So both are the shape's plan's answers read by the names' ids: which of them
pass, and the score each of the passing ones has. One pass over the ids, no plan made
for the permutation (lining one up was ~0.1 ms a request, and as much again to free it).
"""

from __future__ import annotations

import numpy as np

from extender.scoring.batch import Ints
from extender.scoring.compiled import kernel, stream, warms

_NO = np.zeros(0, np.int64)


@kernel
def _passing(where: Ints, ids: Ints, passed: Ints, size: int) -> tuple[bool, Ints, int]:
    """Positions of ``ids`` whose node is at a ``passed`` position of the plan (``where``:
    id -> position there); False unless ids list each of the plan's ``size`` candidates
    exactly once. (And what ``stream`` read: the id table, streamed in before the
    look-ups in a new order.)"""
    state = np.zeros(size, np.int8)  # 1: passes; 2: listed
    streamed = stream(where, 8)
    for at in passed:
        state[at] = 1
    out = np.empty(len(ids), np.int64)
    n = 0
    for k in range(len(ids)):
        i = ids[k]
        if i < 0 or i >= len(where) or where[i] < 0 or state[where[i]] >= 2:
            return False, out[:0], streamed
        state[where[i]] += 2
        if state[where[i]] == 3:
            out[n] = k
            n += 1
    return len(ids) == size, out[:n], streamed


@kernel
def _scores(by_id: Ints, ids: Ints, size: int) -> tuple[bool, Ints, int]:
    """Each id's score (``by_id``: -1 not scored); False unless ids list each of the
    ``size`` scored nodes exactly once (and what the stream read)."""
    out = np.empty(len(ids), np.int64)
    listed = np.zeros(len(by_id), np.bool_)
    streamed = stream(by_id, 8)
    for k in range(len(ids)):
        i = ids[k]
        if i < 0 or i >= len(by_id) or by_id[i] < 0 or listed[i]:
            return False, out[:0], streamed
        listed[i] = True
        out[k] = by_id[i]
    return len(ids) == size, out, streamed


def passing_positions(where: Ints, ids: Ints, passed: Ints, size: int) -> Ints | None:
    """Where the passing nodes are in a list of ``ids`` that permutes the plan's ``size``
    candidates (``where``: id -> position in the plan), ascending; None if it does not."""
    ok, positions, _ = _passing(where, ids, passed, size)
    return positions if ok else None


def scores_by_id(ids: Ints, scores: Ints, count: int) -> Ints:
    """The table ``scores_of`` reads: each id's score, -1 for ids not scored."""
    by_id = np.full(count, -1, np.int64)
    by_id[ids] = scores
    return by_id


def scores_of(by_id: Ints, ids: Ints, size: int) -> Ints | None:
    """The scores of a list of ``ids`` that permutes the ``size`` scored nodes, in its
    order; None if it does not."""
    ok, scores, _ = _scores(by_id, ids, size)
    return scores if ok else None


@warms
def _compile() -> None:
    one = np.zeros(1, np.int64)
    passing_positions(one, one, one, 1)
    scores_of(one, one, 1)
    passing_positions(_NO, _NO, _NO, 0)
