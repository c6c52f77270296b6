"""The comparison's outputs: a Markdown table and two PNG plots (matplotlib, Agg)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .run import Result

START = "<!-- quality-table:start -->"
END = "<!-- quality-table:end -->"


def markers(name: str) -> tuple[str, str]:
    """The table markers of one evaluation in docs/scheduling.md ("" the synthetic one)."""
    if not name:
        return START, END
    return f"<!-- quality-table:{name}:start -->", f"<!-- quality-table:{name}:end -->"


GRID = [i / 100 for i in range(0, 131)]

Runs = Mapping[tuple[str, str], Sequence[Result]]  # (label, mode) -> one Result per repeat


def _mean(xs: Sequence[float]) -> float:
    return statistics.mean(xs) if xs else 0.0


def _sd(xs: Sequence[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def table(runs: Runs, labels: Sequence[str]) -> str:
    """One row per policy: kube-scheduler arithmetic (headline) beside the ideal argmax."""
    head = (
        "| policy | alloc @100% arrived | same, ideal ties | alloc at stop | per seed at stop "
        "| idle GPUs at stop | fragmented at stop | $/delivered GiB-h (fill) | $/h in use @50% "
        "| on-demand-only on spot | placed + failed = arrived |"
        "\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = [head]
    for label in labels:
        k, i = runs[(label, "kube")], runs.get((label, "ideal"), [])
        a100 = [r.allocation_at(1.0) for r in k]
        ideal = f"{_mean([r.allocation_at(1.0) for r in i]):.1%}" if i else "-"
        idle = _mean([r.idle_gpus / r.gpus for r in k])
        frag = _mean([r.frag_gib / r.capacity_gib for r in k])
        fill = _mean([r.fill_cost_per_gib_hour() for r in k])
        half = _mean([next((p[2] for p in r.curve if p[0] >= 0.5), 0.0) for r in k])
        placed, failed, arrived = (
            sum(getattr(r, f) for r in k) for f in ("placed", "failed", "arrived")
        )
        rows.append(
            f"| {label} | {_mean(a100):.1%} ± {_sd(a100):.1%} | {ideal} "
            f"| {_mean([r.allocation for r in k]):.1%} "
            f"| {' / '.join(f'{r.allocation:.1%}' for r in k)} | {idle:.1%} | {frag:.1%} "
            f"| {fill * 1000:.1f} m$ | {half:,.0f} $ | {sum(r.od_on_spot for r in k)} "
            f"| {placed} + {failed} = {arrived} |"
        )
    return "\n".join(rows)


def on_grid(r: Result, value: int) -> list[float]:
    """A curve column (1: allocation, 4: $/GiB-h) sampled at GRID arrived fractions."""
    out, j, last = [], 0, 0.0
    for x in GRID:
        while j < len(r.curve) and r.curve[j][0] <= x:
            p = r.curve[j]
            last = p[1] if value == 1 else (p[2] / p[3] if p[3] else 0.0)
            j += 1
        out.append(last if j < len(r.curve) or x <= r.curve[-1][0] else float("nan"))
    return out


def _mean_curve(rs: Sequence[Result], value: int) -> list[float]:
    cols = [on_grid(r, value) for r in rs]
    return [statistics.mean(v) for v in zip(*cols, strict=True)]


def plot_allocation(runs: Runs, labels: Sequence[str], path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(9, 5.5))
    xs = [x * 100 for x in GRID]
    for label in labels:
        ax.plot(xs, [y * 100 for y in _mean_curve(runs[(label, "kube")], 1)], label=label)
    for label in labels:
        if label.startswith("fgd") and (label, "ideal") in runs and "cost" not in label:
            ys = _mean_curve(runs[(label, "ideal")], 1)
            ax.plot(xs, [y * 100 for y in ys], "k--", lw=1, label=f"{label}, ideal ties")
    ax.plot(xs, xs, ":", color="grey", lw=1, label="everything placed")
    ax.set(
        xlabel="arrived workload (% of cluster GPU memory)",
        ylabel="GPU memory allocated (%)",
        title=title,
        xlim=(40, 130),
        ylim=(40, 101),
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_cost(runs: Runs, labels: Sequence[str], path: Path, title: str) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5), width_ratios=(3, 2))
    xs = [x * 100 for x in GRID]
    for label in labels:
        ys = _mean_curve(runs[(label, "kube")], 4)
        left.plot(xs, [y * 1000 for y in ys], label=label)
    left.set(
        xlabel="arrived workload (% of cluster GPU memory)",
        ylabel="USD/h of nodes in use per allocated GiB (milli-USD)",
        xlim=(5, 110),
        ylim=(0, 150),
        title=title,
    )
    left.grid(alpha=0.3)
    left.legend(fontsize=7)
    fills = [
        _mean([r.fill_cost_per_gib_hour() for r in runs[(lb, "kube")]]) * 1000 for lb in labels
    ]
    right.barh(list(labels), fills, color="tab:blue")
    right.invert_yaxis()
    right.set(xlabel="milli-USD per delivered GiB-hour, filling to 100%")
    for y, v in enumerate(fills):
        right.text(v, y, f" {v:.1f}", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def splice(doc: Path, text: str, name: str = "") -> bool:
    """Replace the block between the ``name`` table's markers in ``doc``; False if none."""
    if not doc.exists():
        return False
    start, end = markers(name)
    body = doc.read_text()
    if start not in body or end not in body:
        return False
    head, rest = body.split(start, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{start}\n{text}\n{end}{tail}")
    return True
