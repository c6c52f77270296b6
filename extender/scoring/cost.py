"""The cost term: cheaper GPU memory first.

cost(n) = (p_max - p(n)) / (p_max - p_min)   over the candidate nodes, p = $/GPU-GiB-hour
A node whose price is unknown gets 0.5 (neither rewarded nor punished); when every
candidate costs the same, all get 1. Computed over arrays (NaN = unknown price), as the
filter does it for thousands of candidates per pod.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]


def cost_array(prices: Floats) -> Floats:
    out = np.full(prices.shape, 0.5)
    known = ~np.isnan(prices)
    if known.any():
        p = prices[known]
        lo, hi = p.min(), p.max()
        out[known] = (hi - p) / (hi - lo) if hi > lo else 1.0
    return out


def cost_terms(prices: Mapping[str, float | None]) -> dict[str, float]:
    names = list(prices)
    values = np.array([np.nan if prices[n] is None else prices[n] for n in names], dtype=float)
    return dict(zip(names, cost_array(values).tolist(), strict=True))
