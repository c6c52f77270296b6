"""Answers for candidates already answered, listed in another order.

kube-scheduler's parallel filter workers hand feasible nodes over in the order they
finish, so for pod after pod of one shape the extender's filter gets the same candidates
permuted, and prioritize then gets the nodes the filter passed, permuted the same way.
Neither answer depends on the order: a candidate passes or not by itself (narrowing
passes every node within epsilon of the best of the set) and a score is normalised over
the set. So both are the shape's plan's answers read by the names' ids: which of them
pass, and the score each of the passing ones has. A few array operations over the ids,
no plan made for the permutation.
"""

from __future__ import annotations

import numpy as np

from extender.scoring.batch import Ints


def _positions(table: Ints, ids: Ints, size: int) -> Ints | None:
    """``table[ids]`` when ids list each of the ``size`` entries the table holds (values
    0..size-1; -1 none) exactly once; else None."""
    if len(ids) != size:
        return None
    if not size:
        return ids
    if ids.min() < 0 or ids.max() >= len(table):
        return None
    at = table[ids]
    if at.min() < 0 or at.max() >= size:
        return None
    listed = np.zeros(size, np.bool_)
    listed[at] = True
    return at if listed.all() else None  # size distinct entries of size: each once


def passing_positions(where: Ints, ids: Ints, passed: Ints, size: int) -> Ints | None:
    """Where the passing nodes are in a list of ``ids`` that permutes the plan's ``size``
    candidates (``where``: id -> position in the plan), ascending; None if it does not."""
    at = _positions(where, ids, size)
    if at is None:
        return None
    passes = np.zeros(size, np.bool_)
    passes[passed] = True
    return np.flatnonzero(passes[at])


def scores_by_id(ids: Ints, scores: Ints, count: int) -> Ints:
    """The table ``scores_of`` reads: each id's score, -1 for ids not scored."""
    by_id = np.full(count, -1, np.int64)
    by_id[ids] = scores
    return by_id


def scores_of(by_id: Ints, ids: Ints, size: int) -> Ints | None:
    """The scores of a list of ``ids`` that permutes the ``size`` scored nodes, in its
    order; None if it does not."""
    if len(ids) != size:
        return None
    if not size:
        return ids.copy()
    if ids.min() < 0 or ids.max() >= len(by_id):
        return None
    scores = by_id[ids]
    if scores.min() < 0:
        return None
    listed = np.zeros(len(by_id), np.bool_)
    listed[ids] = True
    return scores if int(listed.sum()) == size else None  # no id listed twice
