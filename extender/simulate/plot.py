"""PNG comparison of policies from a simulation run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def plot(results: Sequence[Any], path: str) -> None:
    names = [r.policy for r in results]
    panels = (
        ("GPU memory allocated", [r.allocation_rate * 100 for r in results], "%"),
        ("Free memory fragmented", [r.fragmentation * 100 for r in results], "%"),
        ("Cost per delivered GiB-hour", [r.usd_per_gib_hour for r in results], "$"),
        ("Pods unplaceable", [r.unplaceable for r in results], "pods"),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6))
    for ax, (title, values, unit) in zip(axes, panels, strict=True):
        bars = ax.bar(
            names, values, color=["#4c72b0", "#dd8452", "#55a868", "#c44e52"][: len(names)]
        )
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        ax.bar_label(bars, fmt="%.3g", fontsize=8)
    fig.suptitle("headroom simulate: policies on the same cluster and workload", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
