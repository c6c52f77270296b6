"""A retried or concurrent bind of one pod never grants twice and never loses the row
(issue 23 F3), on a real PostgreSQL server whose write lock a test holds, and on SQLite.

kube-scheduler retries a bind after its 5 s extender timeout, often while the first call
is still writing. Before: the retry saw the first call's reservation and answered "ok",
the first call's write then failed and freed the reservation, and the pod ran with no
ledger row and no reservation (5 x 20 GiB ended up on 4 x 24 GiB GPUs).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from extender.core.allocation import Decision, LedgerUnavailable
from extender.ledger.sql import SqlLedger
from extender.pricing import load_pricebook
from extender.state.inventory import Grant, Inventory
from tests.ledger.pg import PgServer
from tests.support import Extender, gpu_pod, running_extender

GIB = 1024


def _bind_args(name: str, node: str = "n1") -> dict[str, str]:
    return {"PodName": name, "PodNamespace": "ml", "PodUID": f"uid-{name}", "Node": node}


def _filtered(ext: Extender, name: str, memory: str, nodes: list[str]) -> None:
    reply = ext.post("filter", ext.schedule_args(gpu_pod(name, memory=memory), nodes)).json()
    assert reply["Error"] == ""


def _consistent(ext: Extender) -> dict[str, int]:
    """Every pod with an active ledger row holds exactly that reservation and vice versa;
    no GPU is granted past its memory. Returns MiB reserved per GPU."""
    service = ext.built.service
    active: dict[str, list[tuple[str, int]]] = {}
    for a in service.ledger.active():
        active.setdefault(a.pod.uid, []).append((a.grant.gpu_uuid, a.grant.memory_mib))
    per_gpu: dict[str, int] = {}
    for uid, rows in active.items():
        held = [(g.gpu_uuid, g.memory_mib) for g in service.inventory.grants_of(uid)]
        assert sorted(held) == sorted(rows), uid
        for uuid, mib in rows:
            per_gpu[uuid] = per_gpu.get(uuid, 0) + mib
    for node in service.inventory.node_names():
        view = service.inventory.view(node)
        assert view is not None
        for gpu in view.gpus:
            assert gpu.reserved_mib == per_gpu.get(gpu.uuid, 0)
            assert gpu.reserved_mib <= gpu.total_mib
    return per_gpu


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> Iterator[str]:
    dsn = pg_server.create_db()
    yield dsn
    pg_server.drop_db(dsn)


class HeldWriteLock:
    """Another session holding the ledger's write lock (the chain head's row lock), as a
    slow or stuck writer of another replica would."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn)
        self.conn.execute("SELECT seq FROM chain_head WHERE id = 1 FOR UPDATE")

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


def _post_later(ext: Extender, body: dict[str, str], delay: float) -> tuple[threading.Thread, list]:
    out: list[Any] = []

    def run() -> None:
        time.sleep(delay)
        out.append(ext.post("bind", body).json()["Error"])

    t = threading.Thread(target=run)
    t.start()
    return t, out


@pytest.mark.postgres
def test_a_retry_while_the_first_write_is_stuck_and_then_fails_grants_nothing(
    tmp_path: Path, pg_dsn: str
) -> None:
    with running_extender(tmp_path, db=pg_dsn, ledger_timeout=1.0, bind_wait=4.0) as ext:
        ext.add_node("n1", "1xA10G:24Gi")
        _filtered(ext, "a", "20Gi", ["n1"])
        lock = HeldWriteLock(pg_dsn)
        try:
            first, first_out = _post_later(ext, _bind_args("a"), 0)
            retry, retry_out = _post_later(ext, _bind_args("a"), 0.3)  # the scheduler's retry
            first.join()
            retry.join()
        finally:
            lock.release()
        # both failed in time (lock timeout), neither answered "ok" over the other
        assert "ledger unavailable" in first_out[0] and "timeout" in first_out[0]
        assert retry_out[0] != ""
        assert ext.built.service.ledger.for_pod("uid-a") == []
        assert _consistent(ext) == {}
        # the next retry, with the database free again, grants once
        assert ext.post("bind", _bind_args("a")).json()["Error"] == ""
        # and the GPU is not handed out again: a second 20 GiB pod does not fit
        _filtered(ext, "b", "20Gi", ["n1"])
        assert "GiB free" in ext.post("bind", _bind_args("b")).json()["Error"]
        (gpu_mib,) = _consistent(ext).values()
        assert gpu_mib == 20 * GIB
        assert ext.built.service.ledger.verify_chain().ok


@pytest.mark.postgres
def test_a_retry_waits_for_a_slow_first_write_and_answers_its_outcome(
    tmp_path: Path, pg_dsn: str
) -> None:
    with running_extender(tmp_path, db=pg_dsn, ledger_timeout=3.0, bind_wait=4.0) as ext:
        ext.add_node("n1", "1xA10G:24Gi")
        _filtered(ext, "a", "20Gi", ["n1"])
        lock = HeldWriteLock(pg_dsn)
        first, first_out = _post_later(ext, _bind_args("a"), 0)
        retry, retry_out = _post_later(ext, _bind_args("a"), 0.3)
        time.sleep(1.0)
        lock.release()  # the first write goes through
        first.join()
        retry.join()
        assert first_out == [""] and retry_out == [""]
        rows = ext.built.service.ledger.for_pod("uid-a")
        assert len(rows) == 1 and rows[0].ended_at is None
        assert _consistent(ext) == {rows[0].grant.gpu_uuid: 20 * GIB}


class LostAck(SqlLedger):
    """A ledger whose answer to a write is lost: the write commits (or, with
    ``written=False``, does not) and the call raises as a dropped connection would."""

    def __init__(self, inner: SqlLedger, written: bool) -> None:
        self.__dict__.update(inner.__dict__)
        self.written = written
        self.armed = True

    def record_decision(self, decision: Decision) -> Any:
        if not self.armed:
            return super().record_decision(decision)
        self.armed = False
        if self.written:
            super().record_decision(decision)
        raise LedgerUnavailable("connection lost during COMMIT", maybe_written=True)


@pytest.mark.parametrize("written", [True, False])
def test_a_lost_commit_answer_keeps_the_memory_until_the_ledger_says(
    tmp_path: Path, written: bool
) -> None:
    with running_extender(tmp_path) as ext:
        ext.add_node("n1", "1xA10G:24Gi")
        service = ext.built.service
        # the bind path writes through the lost answers
        service.binding.ledger = LostAck(service.ledger, written)  # type: ignore[arg-type]
        _filtered(ext, "a", "20Gi", ["n1"])
        assert "ledger unavailable" in ext.post("bind", _bind_args("a")).json()["Error"]
        # the write may have happened: nobody else gets that memory meanwhile
        assert [g.memory_mib for g in service.inventory.grants_of("uid-a")] == [20 * GIB]
        _filtered(ext, "b", "20Gi", ["n1"])
        assert "GiB free" in ext.post("bind", _bind_args("b")).json()["Error"]
        # the retry asks the ledger: the row stands (bound now) or never was (granted now)
        assert ext.post("bind", _bind_args("a")).json()["Error"] == ""
        rows = service.ledger.for_pod("uid-a")
        assert len(rows) == 1 and rows[0].ended_at is None
        assert sum(_consistent(ext).values()) == 20 * GIB


def test_duplicate_binds_under_contention_leave_ledger_and_reservations_equal(
    tmp_path: Path,
) -> None:
    """Each of 60 pods bound three times at once (retries racing), onto four nodes:
    before, pods ended up active in the ledger but not reserved."""
    with running_extender(tmp_path) as ext:
        nodes = [f"n{i}" for i in range(4)]
        for n in nodes:
            ext.add_node(n, "2xA10G:24Gi")
        names = [f"p{i}" for i in range(60)]
        for i, name in enumerate(names):
            _filtered(ext, name, "6Gi", [nodes[i % 4]])
        calls = [(name, nodes[i % 4]) for i, name in enumerate(names) for _ in range(3)]
        with ThreadPoolExecutor(max_workers=24) as pool:
            errors = list(
                pool.map(lambda c: ext.post("bind", _bind_args(*c)).json()["Error"], calls)
            )
        by_pod: dict[str, list[str]] = {}
        for (name, _), err in zip(calls, errors, strict=True):
            by_pod.setdefault(name, []).append(err)
        service = ext.built.service
        for name, errs in by_pod.items():
            active = [a for a in service.ledger.for_pod(f"uid-{name}") if a.ended_at is None]
            if "" in errs:  # answered bound at least once: it has its row and reservation
                assert len(active) == 1, name
            else:
                assert active == [], name
        _consistent(ext)
        # 2 GPUs x 24 GiB per node, 512 MiB margin: three 6 GiB pods per GPU fit
        assert sum(1 for errs in by_pod.values() if "" in errs) == 24


def test_a_reservation_is_never_replaced_nor_freed_by_another_call() -> None:
    inv = Inventory(load_pricebook(None, 0.6))
    mine = [Grant("u", "ml", "p", "n1", "GPU-1", 4096)]
    other = [Grant("u", "ml", "p", "n1", "GPU-2", 8192)]
    assert inv.reserve(mine)
    assert not inv.reserve(other)  # refused, not replaced
    assert inv.grants_of("u") == mine
    assert inv.release("u", only=other) == []  # a failed call's release frees nothing
    assert inv.grants_of("u") == mine
    assert inv.release("u", only=mine) == mine
