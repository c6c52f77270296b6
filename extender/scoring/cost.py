"""The cost term: cheaper GPU memory first.

cost(n) = (p_max - p(n)) / (p_max - p_min)   over the candidate nodes, p = $/GPU-GiB-hour
A node whose price is unknown gets 0.5 (neither rewarded nor punished); when every
candidate costs the same, all get 1. ``framework.blended_array`` applies it to thousands
of candidates per pod at once, so the formula takes arrays as well as single prices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]


def cost_of(price: Floats | float, p_min: float, p_max: float) -> Floats | float:
    """cost(n) for each price (NaN: unknown) given the candidates' known price range."""
    known = (p_max - price) / (p_max - p_min) if p_max > p_min else np.ones_like(price)
    return np.where(np.isnan(price), 0.5, known)


def cost_terms(prices: Mapping[str, float | None]) -> dict[str, float]:
    """cost(n) by node name (None: price unknown)."""
    known = [p for p in prices.values() if p is not None]
    lo, hi = (min(known), max(known)) if known else (math.nan, math.nan)
    return {n: float(cost_of(math.nan if p is None else p, lo, hi)) for n, p in prices.items()}
