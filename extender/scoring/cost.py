"""The cost term: cheaper GPU memory first.

cost(n) = (p_max - p(n)) / (p_max - p_min)   over the candidate nodes, p = $/GPU-GiB-hour
A node whose price is unknown gets 0.5 (neither rewarded nor punished); when every
candidate costs the same, all get 1. ``framework.blended_array`` applies it to thousands
of candidates per pod inside its compiled loop, so the formula is a kernel too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from extender.scoring.compiled import kernel

Floats = npt.NDArray[np.float64]


@kernel
def cost_of(price, p_min, p_max):  # numba infers the types
    """cost(n) for one price (NaN: unknown) given the candidates' known price range."""
    if np.isnan(price):
        return 0.5
    return (p_max - price) / (p_max - p_min) if p_max > p_min else 1.0


def cost_terms(prices: Mapping[str, float | None]) -> dict[str, float]:
    """cost(n) by node name (None: price unknown)."""
    known = [p for p in prices.values() if p is not None]
    lo, hi = (min(known), max(known)) if known else (math.nan, math.nan)
    return {n: float(cost_of(math.nan if p is None else p, lo, hi)) for n, p in prices.items()}
