"""The cost term: cheaper GPU memory first.

cost(n) = (p_max - p(n)) / (p_max - p_min)   over the candidate nodes, p = $/GPU-GiB-hour
A node whose price is unknown gets 0.5 (neither rewarded nor punished); when every
candidate costs the same, all get 1.
"""

from __future__ import annotations

from collections.abc import Mapping


def cost_terms(prices: Mapping[str, float | None]) -> dict[str, float]:
    known = [p for p in prices.values() if p is not None]
    if not known:
        return dict.fromkeys(prices, 0.5)
    lo, hi = min(known), max(known)
    span = hi - lo
    out: dict[str, float] = {}
    for name, p in prices.items():
        if p is None:
            out[name] = 0.5
        elif span <= 0:
            out[name] = 1.0
        else:
            out[name] = (hi - p) / span
    return out
