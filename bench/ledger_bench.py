"""Ledger benchmark: binds/s on SQLite and PostgreSQL, chargeback over 1M rows on SQLite.

    PYTHONPATH=. .venv/bin/python bench/ledger_bench.py [--binds 2000] [--rows 1000000]
        [--pg-dsn postgresql://...]   # default: start a throwaway server (tests/ledger/pg.py)

A "bind" is what the extender does per pod: record_decision (one grant) + mark_bound,
each durable before it returns (SQLite synchronous=FULL, PostgreSQL
synchronous_commit=on); with several threads, writes that queue behind a running
transaction share the next one (group commit, extender/ledger/group.py). Figures are
rates from one run on one machine; compare them as ratios, not as absolute promises.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from decimal import Decimal

from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from extender.core.allocation import Decision, GpuGrant, NodeRef, PodRef, Sharing
from extender.ledger import chargeback_report, open_ledger
from extender.ledger.sql import NullHooks, SqlLedger
from extender.ledger.sqlite import SqliteDialect
from extender.wire.clock import SystemClock

T0 = 1_767_225_600.0
GPU_MIB = 81_920


def _decision(uid: str, at: float) -> Decision:
    pod = PodRef(uid, f"ns-{hash(uid) % 20}", f"pod-{uid}", "Job", "train", {"team": "a"})
    node = NodeRef(f"node-{hash(uid) % 50}", "p5.48xlarge", "spot", "us-east-1a", "gpu")
    # a GPU of its own: the ledger refuses a fifth 20 GiB grant on one 80 GiB GPU
    g = GpuGrant(f"GPU-{uid}", 0, "H100", 20_480, GPU_MIB, Sharing.SHARED, Decimal("1.00"))
    return Decision(pod, node, (g,), at, "cheapest")


def binds_per_second(target: str, n: int, threads: int) -> float:
    ledger = open_ledger(target, SystemClock(), hooks=NullHooks())
    per = n // threads

    def work(k: int) -> None:
        for i in range(per):
            uid = f"b{threads}-{k}-{i}"
            ledger.record_decision(_decision(uid, T0 + i))
            ledger.mark_bound(uid, T0 + i + 0.1)

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    t = time.perf_counter()
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    elapsed = time.perf_counter() - t
    ledger.close()
    return per * threads / elapsed


def _bulk_rows(start: int, count: int, rng: random.Random) -> list[tuple[object, ...]]:
    rows = []
    for i in range(start, start + count):
        mib = rng.choice((10_240, 20_480, 40_960, GPU_MIB))
        decided = T0 + rng.uniform(0, 30 * 86400)
        rows.append(
            (
                f"uid-{i}",
                f"ns-{i % 40}",
                f"pod-{i}",
                "Job",
                f"job-{i % 1000}",
                f'{{"team":"t{i % 7}"}}',
                f"node-{i % 500}",
                "p5.48xlarge",
                "spot" if i % 3 else "on-demand",
                "us-east-1a",
                "gpu",
                f"GPU-{i % 8}",
                i % 8,
                "H100",
                mib,
                GPU_MIB,
                "shared",
                "",
                "",
                "",
                str(Decimal("4.00") * mib / GPU_MIB),
                "cheapest",
                "ended",
                decided,
            )
        )
    return rows


def chargeback_timing(path: str, n: int) -> tuple[float, float, int]:
    ledger = SqlLedger(SqliteDialect(path, synchronous="OFF"), NullHooks())
    rng = random.Random(7)
    batch = 50_000
    t = time.perf_counter()
    with tqdm(total=n, unit="row", desc="bulk insert") as bar:
        for start in range(0, n, batch):
            ledger.bulk_insert(_bulk_rows(start, min(batch, n - start), rng))
            bar.update(min(batch, n - start))
    insert_s = time.perf_counter() - t
    with ledger.dialect.write() as conn:  # give the rows an end, as released pods have
        conn.execute("UPDATE allocations SET ended_at = decided_at + 3600 * (1 + id % 12)")
    for k in range(500):
        ledger.record_node(
            NodeRef(f"node-{k}", "p5.48xlarge", "spot" if k % 3 else "on-demand"),
            [(f"GPU-{g}", "H100", GPU_MIB) for g in range(8)],
            Decimal("4.00"),
            T0,
        )
    t = time.perf_counter()
    report = chargeback_report(ledger, T0, T0 + 31 * 86400, "namespace", T0 + 31 * 86400)
    compute_s = time.perf_counter() - t
    ledger.close()
    return insert_s, compute_s, sum(g.allocations for g in report.groups)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binds", type=int, default=2000)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--pg-dsn", default=None)
    ap.add_argument("--no-pg", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="headroom-bench-")
    results: list[tuple[str, str]] = []
    server = None
    targets = [("sqlite", lambda k: os.path.join(tmp, f"binds-{k}.db"))]
    if not args.no_pg:
        if args.pg_dsn is None:
            from tests.ledger.pg import PgServer, binaries_missing

            if binaries_missing() is None:
                server = PgServer().start()
        if args.pg_dsn or server:
            targets.append(("postgresql", lambda k: args.pg_dsn or server.create_db()))
    try:
        for name, target in targets:
            for threads in (1, 4):
                rate = binds_per_second(target(threads), args.binds, threads)
                results.append((f"binds/s {name}, {threads} thread(s)", f"{rate:,.0f}"))
        insert_s, compute_s, counted = chargeback_timing(os.path.join(tmp, "big.db"), args.rows)
        results.append(
            (
                f"bulk insert {args.rows:,} rows (SQLite)",
                f"{insert_s:.1f} s ({args.rows / insert_s:,.0f} rows/s)",
            )
        )
        results.append(
            (
                f"chargeback query+compute, {counted:,} rows (SQLite)",
                f"{compute_s:.1f} s ({counted / compute_s:,.0f} rows/s)",
            )
        )
    finally:
        if server:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    width = max(len(k) for k, _ in results)
    print(f"\n{'measure':<{width}}  result\n{'-' * width}  {'-' * 30}")
    for k, v in results:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
