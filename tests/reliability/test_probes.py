"""Liveness never waits on the ledger; readiness says when the ledger is unavailable
(issue 23 F4: ~40 binds hung on a frozen PostgreSQL filled the thread pool and /healthz
took 14.9 s, past any probe's timeout, so the kubelet would have restarted the pod)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg

from tests.reliability.conftest import StoppablePg
from tests.support import gpu_pod, running_extender

PROBE_TIMEOUT_S = 2.0  # what a kubelet probe would allow; the server's waits are longer


def test_probes_while_binds_hang_on_a_locked_ledger(
    tmp_path: Path, stoppable_pg: StoppablePg
) -> None:
    dsn = stoppable_pg.server.create_db()
    with running_extender(tmp_path, db=dsn, ledger_timeout=4.0) as ext:
        ext.add_node("n1", "4xA10G:24Gi")
        names = [f"p{i}" for i in range(40)]
        for name in names:
            ext.post("filter", ext.schedule_args(gpu_pod(name, memory="1Gi"), ["n1"]))
        lock = psycopg.connect(dsn)  # another writer holds the ledger's write lock
        lock.execute("SELECT seq FROM chain_head WHERE id = 1 FOR UPDATE")
        probe = httpx.Client(base_url=ext.url, timeout=PROBE_TIMEOUT_S)
        try:
            with ThreadPoolExecutor(max_workers=40) as pool:
                binds = [
                    pool.submit(
                        ext.post,
                        "bind",
                        {"PodName": n, "PodNamespace": "ml", "PodUID": f"uid-{n}", "Node": "n1"},
                    )
                    for n in names
                ]
                # while 40 binds wait on the lock, both probes answer in time (the
                # database itself answers reads: ready)
                assert probe.get("/healthz").status_code == 200
                assert probe.get("/readyz").status_code == 200
                assert probe.get("/healthz").status_code == 200
                errors = [f.result().json()["Error"] for f in binds]
        finally:
            lock.rollback()
            lock.close()
            probe.close()
        assert all("ledger unavailable" in e for e in errors)
        assert ext.built.service.ledger.active() == []
        assert httpx.get(f"{ext.url}/readyz", timeout=5).status_code == 200


def test_readiness_fails_and_liveness_holds_while_postgres_is_down(
    tmp_path: Path, stoppable_pg: StoppablePg
) -> None:
    dsn = stoppable_pg.server.create_db()
    with running_extender(tmp_path, db=dsn) as ext:
        assert ext.client.get("/readyz").status_code == 200
        stoppable_pg.stop()
        ready = ext.client.get("/readyz")
        assert ready.status_code == 503 and "ledger unavailable" in ready.json()["reason"]
        assert ext.client.get("/healthz").status_code == 200
        stoppable_pg.start()
        assert ext.client.get("/readyz").status_code == 200


@contextmanager
def frozen(pg: StoppablePg) -> Iterator[None]:
    """Every process of the server stopped (SIGSTOP): connections stay open, nothing
    answers, and the server cannot enforce its own statement timeout."""

    def pgrep(*args: str) -> list[int]:
        out = subprocess.run(["pgrep", *args], capture_output=True, text=True, check=False)
        return [int(p) for p in out.stdout.split()]

    postmaster = pgrep("-f", str(pg.server.data))
    assert postmaster
    pids = postmaster + [c for p in postmaster for c in pgrep("-P", str(p))]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def test_readiness_says_so_when_postgres_freezes(tmp_path: Path, stoppable_pg: StoppablePg) -> None:
    dsn = stoppable_pg.server.create_db()
    with running_extender(tmp_path, db=dsn) as ext:
        probe = httpx.Client(base_url=ext.url, timeout=PROBE_TIMEOUT_S + 1)
        assert probe.get("/readyz").status_code == 200
        with frozen(stoppable_pg):
            ready = probe.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["reason"].startswith("ledger unavailable")
            assert probe.get("/healthz").status_code == 200
        probe.close()


def test_a_bind_answers_in_time_while_postgres_is_frozen_and_settles_after(
    tmp_path: Path, stoppable_pg: StoppablePg
) -> None:
    """The database's own timeouts need a running server; a frozen one is met by the
    bind path's deadline: an Error before kube-scheduler's 5 s, the memory held, and the
    pod's next bind asks the ledger what became of the write."""
    dsn = stoppable_pg.server.create_db()
    with running_extender(tmp_path, db=dsn, ledger_timeout=1.0) as ext:
        ext.add_node("n1", "1xA10G:24Gi")
        ext.post("filter", ext.schedule_args(gpu_pod("a", memory="20Gi"), ["n1"]))
        bind = {"PodName": "a", "PodNamespace": "ml", "PodUID": "uid-a", "Node": "n1"}
        scheduler = httpx.Client(base_url=ext.url, timeout=5.0)  # its extender httpTimeout
        with frozen(stoppable_pg):
            error = scheduler.post("/bind", json=bind).json()["Error"]
            assert "did not answer" in error
            held = ext.built.service.inventory.grants_of("uid-a")
            assert [g.memory_mib for g in held] == [20 * 1024]  # nobody else gets it
        scheduler.close()
        # thawed: the retry settles (the stuck write committed or not) and grants once
        assert ext.post("bind", bind).json()["Error"] == ""
        rows = [a for a in ext.built.service.ledger.for_pod("uid-a") if a.ended_at is None]
        assert len(rows) == 1
        view = ext.built.service.inventory.view("n1")
        assert view is not None and view.gpus[0].reserved_mib == 20 * 1024
