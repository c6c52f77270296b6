"""Pods bound over time, one line per run of bench/throughput.py.

Standalone (matplotlib and the standard library only) so the figure can be drawn by any
Python that has matplotlib from the ``--json`` the benchmark wrote, as the project's own
environment does not depend on matplotlib:

    python3 bench/throughput_plot.py results.json docs/bench-throughput.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def plot_timelines(timelines: dict[str, list[float]], out: Path, title: str) -> None:
    """Each run's bind times (seconds after its first bind) as a cumulative count."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, times in timelines.items():
        if times:
            rate = len(times) / times[-1] if times[-1] else 0
            ax.step(
                times, range(1, len(times) + 1), where="post", label=f"{name} ({rate:.0f} pods/s)"
            )
    ax.set_xlabel("seconds after the first bind")
    ax.set_ylabel("pods bound")
    ax.set_title(f"kube-scheduler throughput: {title}")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    data = json.loads(Path(argv[0]).read_text())
    a = data["args"]
    timelines = {r["name"]: r["timeline"] for r in data["runs"]}
    plot_timelines(timelines, Path(argv[1]), f"{a['nodes']} nodes, {a['pods']} pods")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
