"""Fault (c): PostgreSQL (the HA ledger) goes away. Bind answers a protocol ``Error``
naming the ledger and leaves nothing behind (no reservation, no row); filter, prioritize
and agent reports keep working from memory; when PostgreSQL is back the same extender
binds again, without a restart. The DSN's password never shows up in a reply or a log."""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg
import pytest

from tests.support import gpu_pod, running_extender

from .conftest import StoppablePg

pytestmark = pytest.mark.postgres
PASSWORD = "s3cret-pg-password"


def test_bind_fails_cleanly_while_postgres_is_down_and_recovers(
    tmp_path: Path, stoppable_pg: StoppablePg, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    plain = stoppable_pg.server.create_db()
    dsn = plain.replace("postgres@", f"postgres:{PASSWORD}@")  # trust auth ignores it
    with running_extender(tmp_path, db=dsn) as ext:
        ext.add_node("n1")
        bind = {"PodName": "p1", "PodNamespace": "ml", "PodUID": "uid-p1", "Node": "n1"}
        assert ext.post("filter", ext.schedule_args(gpu_pod("p1", memory="4Gi"), ["n1"])).json()[
            "NodeNames"
        ] == ["n1"]
        assert ext.post("bind", bind).json()["Error"] == ""

        stoppable_pg.stop()
        ext.report("n1")  # reports keep the node fresh; their ledger writes are dropped
        args = ext.schedule_args(gpu_pod("p2", memory="4Gi"), ["n1"])
        assert ext.post("filter", args).json()["NodeNames"] == ["n1"]
        scores = ext.post("prioritize", args)
        assert scores.status_code == 200 and scores.json()[0]["Host"] == "n1"

        bind2 = {**bind, "PodName": "p2", "PodUID": "uid-p2"}
        reply = ext.post("bind", bind2)
        assert reply.status_code == 200  # a protocol answer, not a transport failure
        error = reply.json()["Error"]
        assert error.startswith("ledger unavailable, bind refused")
        assert ext.built.service.inventory.grants_of("uid-p2") == []  # rolled back
        assert ext.client.get("/v1/allocations").status_code == 503
        released = ext.client.post("/v1/pods/uid-p1/release")
        assert released.status_code == 503 and "ledger unavailable" in released.text
        # the row could not be ended, so the memory stays reserved (never handed out twice)
        assert ext.built.service.inventory.grants_of("uid-p1") != []
        metrics = ext.client.get("/metrics")  # ledger gauges skipped, the rest still served
        assert metrics.status_code == 200 and "headroom_binds_total" in metrics.text

        stoppable_pg.start()
        with psycopg.connect(plain) as conn:  # nothing half-written for the refused bind
            rows = conn.execute("SELECT count(*) FROM allocations WHERE pod_uid = 'uid-p2'")
            assert rows.fetchone() == (0,)
        # no restart: binds reconnect. A pooled thread whose connection died with the
        # server fails once more (cleanly) and reconnects; kube-scheduler retries the pod.
        replies = [ext.post("bind", bind2).json()["Error"] for _ in range(5)]
        assert "" in replies
        assert all(e.startswith("ledger unavailable") for e in replies[: replies.index("")])
        with psycopg.connect(plain) as conn:
            rows = conn.execute(
                "SELECT count(*) FROM allocations WHERE pod_uid = 'uid-p2' AND ended_at IS NULL"
            )
            assert rows.fetchone() == (1,)
        audit = [ext.client.get("/v1/allocations").status_code for _ in range(5)]
        assert 200 in audit and set(audit) <= {200, 503}

    assert PASSWORD not in error
    assert PASSWORD not in released.text
    for record in caplog.records:
        assert PASSWORD not in record.getMessage()
        assert PASSWORD not in str(vars(record))
