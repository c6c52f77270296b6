"""A candidate list in a new order, read into positions: JSON decode + dict lookups of the
fresh strings (what plans did before) against ``NameIndex.read_ids`` (``extender/namebytes``:
ids, the strings left in the index until asked for, as the server reads a list), and
``NameIndex.fingerprint`` (what a permutation of a list the decoder keeps costs), for
three naming schemes, with caches warm and with them flushed between reads (as in the
server, where the scheduler's process runs between two requests).

    .venv/bin/python bench/names.py [--nodes 5000] [--reads 300]

Ratios are taken within one run (the machine is shared): new / old per row.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from operator import itemgetter
from pathlib import Path

import msgspec
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from extender.codec.namebytes import NameIndex
from extender.wire.protocol import NodeName

SCHEMES: dict[str, Callable[[int], str]] = {
    "simulated (node-00042)": lambda i: f"node-{i:05d}",
    "EKS (ip-10-0-12-34.ec2.internal)": lambda i: (
        f"ip-10-{i // 250}-{i % 250}-{i % 7}.ec2.internal"
    ),
    "EKS regional (…us-west-2.compute.internal)": lambda i: (
        f"ip-192-168-{i // 250}-{i % 250}.us-west-2.compute.internal"
    ),
}
FLUSH = np.zeros(8 << 20, np.uint8)  # larger than this machine's L2, a share of its L3


def timed(read: Callable[[bytes], object], bodies: list[bytes], flush: bool) -> float:
    """Median µs of one read; every read gets a new permutation."""
    times = []
    for body in bodies:
        if flush:
            np.add(FLUSH, 1, out=FLUSH)
        t = time.perf_counter()
        read(body)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def row(scheme: str, nodes: int, reads: int) -> list[str]:
    names = [SCHEMES[scheme](i) for i in range(nodes)]
    rng = random.Random(1)
    bodies = [msgspec.json.encode(rng.sample(names, nodes)) for _ in range(reads)]
    index = NameIndex()
    index.read(msgspec.json.encode(names))
    position = {n: i for i, n in enumerate(names)}
    decoder = msgspec.json.Decoder(list[NodeName])

    def old(body: bytes) -> object:
        return itemgetter(*decoder.decode(body))(position)

    out = [scheme, f"{len(bodies[0]) / 1024:.0f}"]
    for flush in (False, True):
        before, after = timed(old, bodies, flush), timed(index.read_ids, bodies, flush)
        told = timed(index.fingerprint, bodies, flush)  # after read_ids: none parsed twice
        out += [f"{before:.0f}", f"{after:.0f}", f"{after / before:.2f}", f"{told:.0f}"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--reads", type=int, default=300)
    args = ap.parse_args()
    print(
        "| names | body KiB | warm: decode+dict µs | warm: read µs | ratio "
        "| warm: fingerprint µs | flushed: decode+dict µs | flushed: read µs | ratio "
        "| flushed: fingerprint µs |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for scheme in SCHEMES:
        print("| " + " | ".join(row(scheme, args.nodes, args.reads)) + " |", flush=True)


if __name__ == "__main__":
    main()
