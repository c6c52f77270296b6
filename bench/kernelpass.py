"""A new pod shape's pass over the nodes (``greedy_scores``, ``kernel.c``): by the caller
alone against shared with the helper thread (``helper.h``), each with the trial placements
in the scalar loop and in AVX2 lanes (``lanes.h``), alternated in one run, on a fleet
where every node is in a state of its own (nothing to copy: every node is placed).

    .venv/bin/python bench/kernelpass.py [--nodes 5000] [--passes 200] [--rounds 4] \
        [--pause-ms 0,3]

Each pass is a new memory ask against an 8-shape mix on 4-GPU nodes, as in
``bench/latency.py --shapes cold --varied``. ``--pause-ms``: the caller sleeps this long
before each pass (0: passes back to back; a few ms: the other CPU idles in between, as
between two filters). Medians in µs per pass; the answers of the four ways are compared
bit for bit at the end. On a CPU without AVX2 the lanes columns are the scalar loop.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from extender.scoring import kernel
from extender.scoring.batch import GpuBatch
from extender.scoring.fragmentation import greedy_scores
from extender.scoring.model import GpuDemand, GpuView, Limits, NodeView, Shape

LIM = Limits()
MIX = tuple((Shape(1, 2048 + 1500 * k), 1 / 8) for k in range(8))


def fleet(n: int) -> GpuBatch:
    """n 4xA10G nodes, node i with processes of 256 + i MiB and 2,048 x (i mod 4) MiB."""
    views = []
    for i in range(n):
        used = [256 + i, 2048 * (i % 4), 0, 0]
        gpus = tuple(GpuView(f"n{i}-{j}", j, "A10G", 24_576, u, 0, "") for j, u in enumerate(used))
        views.append(NodeView(f"n{i}", gpus, "spot", "g5.12xlarge", 0.01, version=1))
    return GpuBatch.from_views(views, LIM)


def passes(b: GpuBatch, count: int, pause: float, shared: bool, lanes: bool) -> float:
    """Median seconds of ``count`` passes, each a new ask."""
    kernel.share(shared)
    kernel.lanes(lanes)
    rows = np.arange(len(b), dtype=np.int64)
    spent = []
    for k in range(count):
        time.sleep(pause)
        demand = GpuDemand(count=1, memory_mib=1024 + k, cpu_milli=100)
        t = time.perf_counter()
        greedy_scores(b, rows, demand, LIM, MIX, tie_by_free=True, tie=0.3, stranding=1.0)
        spent.append(time.perf_counter() - t)
    return statistics.median(spent)


WAYS = [(False, False), (False, True), (True, False), (True, True)]  # (shared, lanes)


def same_bits(b: GpuBatch) -> bool:
    demand = GpuDemand(count=2, memory_mib=3000)
    out = []
    for shared, lanes in WAYS:
        kernel.share(shared)
        kernel.lanes(lanes)
        out.append(greedy_scores(b, None, demand, LIM, MIX, True, 0.3, 1.0))
    return all(
        x.tobytes() == y.tobytes() for other in out[1:] for x, y in zip(out[0], other, strict=True)
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--passes", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--pause-ms", default="0,3")
    args = ap.parse_args()
    b = fleet(args.nodes)
    print(
        "| pause ms | round | scalar alone µs | lanes alone µs | scalar shared µs "
        "| lanes shared µs | scalar / lanes, alone | shared | alone / shared, lanes |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for pause in (float(p) / 1000 for p in args.pause_ms.split(",")):
        for r in range(1, args.rounds + 1):
            t = [passes(b, args.passes, pause, shared, lanes) for shared, lanes in WAYS]
            print(
                f"| {pause * 1000:g} | {r} | "
                + " | ".join(f"{x * 1e6:.0f}" for x in t)
                + f" | {t[0] / t[1]:.2f}x | {t[2] / t[3]:.2f}x | {t[1] / t[3]:.2f}x |",
                flush=True,
            )
    kernel.share(True)
    print(f"\n{args.nodes} nodes; AVX2 lanes: {kernel.lanes(True)}; ", end="")
    print(f"the four ways give the same bits: {same_bits(b)}")
    kernel.share(True)
    kernel.lanes(True)


if __name__ == "__main__":
    main()
