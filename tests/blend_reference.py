"""The blend as whole-array NumPy, the oracle ``kernel.blend`` is checked against bit for
bit (``extender.scoring.framework.blend`` has the formula; the kernel computes it in one
pass, with the best node)."""

from __future__ import annotations

import numpy as np

from extender.scoring.cost import cost_of


def blend(
    raw: np.ndarray, fits: np.ndarray, prices: np.ndarray, w_policy: float, w_cost: float
) -> np.ndarray:
    out = np.full(raw.shape[0], np.nan)
    if not fits.any():
        return out
    raw_fit, price_fit = raw[fits], prices[fits]
    lo, hi = raw_fit.min(), raw_fit.max()
    known = price_fit[~np.isnan(price_fit)]
    p_lo, p_hi = (known.min(), known.max()) if known.size else (np.inf, -np.inf)
    policy = (raw_fit - lo) / (hi - lo) if hi > lo else np.ones_like(raw_fit)
    cost = cost_of(price_fit, p_lo, p_hi)
    out[fits] = (w_policy * policy + w_cost * cost) / (w_policy + w_cost)
    return out


def best(b: np.ndarray) -> int:
    """The first of the best blended scores; -1 when none fits."""
    return -1 if np.isnan(b).all() else int(np.nanargmax(b))
