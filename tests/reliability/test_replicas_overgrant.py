"""Issue 24 item 5: two ``headroom serve`` replicas over one real PostgreSQL ledger, binds
for the same GPUs racing through both, never grant a GPU more memory than it has.

Both replicas get the same agents' reports, so each believes every GPU is free until it
hears otherwise; the ledger is where they meet. The burst's pods ask 7 GiB of 24 GiB
A10Gs: each replica alone would place 3 per GPU (21 GiB, under its 512 MiB margin), both
together 6; the ledger holds a GPU to 24 GiB, so one replica's bind is refused with an
``Error`` naming the GPU and kube-scheduler (here: the driver loop) retries the pod.
Checked: Σ granted per GPU ≤ its memory, every acknowledged bind has its row, every
refused one has none, ``headroom ledger verify`` passes; then again with replica B
SIGKILLed mid-burst. ``pytest -s`` prints the figures.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter, defaultdict
from pathlib import Path

import httpx
import pytest

from extender.ledger import open_ledger
from extender.wire.clock import SystemClock
from tests.serveproc import ServeProc
from tests.support import gpu_pod

from .conftest import StoppablePg

pytestmark = pytest.mark.postgres
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODES = ["gpu-0", "gpu-1"]
SPEC, GPU_MIB, ASK = "2xA10G:24Gi", 24 * 1024, "7Gi"
PODS, THREADS_PER_REPLICA, TRIES = 48, 4, 3


def bind(c: httpx.Client, uid: str) -> str:
    """filter then bind, as kube-scheduler does: "ok", "unplaceable" (filter passed no
    node), "lost" (no reply), or the bind's protocol Error."""
    try:
        r = c.post("/filter", json={"Pod": gpu_pod(uid, memory=ASK, uid=uid), "NodeNames": NODES})
        passing = r.json().get("NodeNames") or []
        if not passing:
            return "unplaceable"
        body = {"PodName": uid, "PodNamespace": "ml", "PodUID": uid, "Node": passing[0]}
        error = str(c.post("/bind", json=body).json()["Error"])
    except (httpx.TransportError, ValueError):
        return "lost"
    return error or "ok"


class Burst:
    """Pods split across the replicas, ``THREADS_PER_REPLICA`` binding threads each; a
    refused bind is retried (filter + bind again) up to ``TRIES`` times."""

    def __init__(self, replicas: list[ServeProc]) -> None:
        self.replicas = replicas
        self.outcome: dict[str, list[str]] = {}  # pod -> what each try answered
        self.lock = threading.Lock()
        self.acknowledged = threading.Semaphore(0)

    def run(self) -> list[threading.Thread]:
        threads = []
        for r, serve in enumerate(self.replicas):
            for k in range(THREADS_PER_REPLICA):
                uids = [
                    f"p{i}" for i in range(PODS) if i % len(self.replicas) == r
                ][k::THREADS_PER_REPLICA]  # fmt: skip
                threads.append(threading.Thread(target=self._drive, args=(serve, uids)))
        for t in threads:
            t.start()
        return threads

    def _drive(self, serve: ServeProc, uids: list[str]) -> None:
        with httpx.Client(base_url=serve.url, timeout=10) as c:
            for uid in uids:
                for _ in range(TRIES):
                    answer = bind(c, uid)
                    with self.lock:
                        self.outcome.setdefault(uid, []).append(answer)
                    if answer == "ok":
                        self.acknowledged.release()
                    if answer in ("ok", "unplaceable", "lost"):
                        break


def check(dsn: str, burst: Burst, gpus: set[str], what: str) -> list[str]:
    """Assert the ledger's state against what every try answered; the ledger's refusals."""
    ledger = open_ledger(dsn, SystemClock())
    try:
        rows = ledger.active()
        committed: dict[str, int] = defaultdict(int)
        for a in rows:
            committed[a.grant.gpu_uuid] += a.grant.memory_mib
        held = Counter(a.pod.uid for a in rows)
        answers = [a for tries in burst.outcome.values() for a in tries]
        by_ledger = [a for a in answers if a.startswith("GPU ")]
        by_replica = [a for a in answers if a.startswith("node ")]
        print(
            f"\n[{what}] pods {PODS}, binds tried {len(answers)}: accepted "
            f"{answers.count('ok')}, refused by the ledger {len(by_ledger)}, by the replica's "
            f"own view {len(by_replica)}, unplaceable {answers.count('unplaceable')}, lost "
            f"(no reply) {answers.count('lost')}; rows {len(rows)}, committed per GPU (MiB, "
            f"of {GPU_MIB}): "
            f"{sorted(committed.values(), reverse=True)}, max {max(committed.values())}"
        )
        assert set(committed) <= gpus
        assert max(committed.values()) <= GPU_MIB  # never over a GPU's memory
        assert all(n == 1 for n in held.values())  # one row per 1-GPU pod
        others = [a for a in answers if a not in ("ok", "unplaceable", "lost")]
        assert set(others) == set(by_ledger) | set(by_replica), others[:3]
        for e in by_ledger:  # "GPU <uuid> on <node>: N MiB free of …, M MiB asked"
            assert e.split()[1] in gpus and " MiB free of " in e and "7168 MiB asked" in e
        for uid, tries in burst.outcome.items():
            if tries[-1] == "ok":
                assert held[uid] == 1, uid  # nothing lost
            elif "lost" not in tries:
                assert uid not in held and ledger.for_pod(uid) == [], uid  # refused: no row
    finally:
        ledger.close()
    verify = subprocess.run(
        [sys.executable, "-m", "extender.cli", "ledger", "verify", "--db", dsn],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0 and verify.stdout.startswith("ok: "), verify.stderr
    return by_ledger


def start_replicas(tmp_path: Path, dsn: str) -> tuple[list[ServeProc], set[str]]:
    replicas = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        serve = ServeProc(tmp_path / name, dsn, ["--stale-after", "600", "--policy", "binpack"])
        serve.start()
        for n in NODES:
            serve.report(n, SPEC)  # the same agents report to every replica
        replicas.append(serve)
    gpus = {u for d in replicas[0].drivers.values() for u in d.gpu_uuids}
    assert gpus == {u for d in replicas[1].drivers.values() for u in d.gpu_uuids}
    return replicas, gpus


def test_two_replicas_on_postgres_never_over_grant_a_gpu(
    tmp_path: Path, stoppable_pg: StoppablePg
) -> None:
    dsn = stoppable_pg.server.create_db()
    replicas, gpus = start_replicas(tmp_path, dsn)
    try:
        burst = Burst(replicas)
        for t in burst.run():
            t.join(120)
            assert not t.is_alive()
        assert "lost" not in {a for tries in burst.outcome.values() for a in tries}
        refused = check(dsn, burst, gpus, "two replicas")
        assert refused, "the burst never made the replicas contend in the ledger"
    finally:
        for r in replicas:
            r.stop()


def test_one_replica_sigkilled_mid_burst_over_grants_and_loses_nothing(
    tmp_path: Path, stoppable_pg: StoppablePg
) -> None:
    dsn = stoppable_pg.server.create_db()
    replicas, gpus = start_replicas(tmp_path, dsn)
    try:
        burst = Burst(replicas)
        threads = burst.run()
        for _ in range(4):  # a few grants in, B dies with binds in flight
            assert burst.acknowledged.acquire(timeout=60)
        replicas[1].kill()
        for t in threads:
            t.join(120)
            assert not t.is_alive()
        check(dsn, burst, gpus, "replica B SIGKILLed mid-burst")
    finally:
        for r in replicas:
            r.stop()
