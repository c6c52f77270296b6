"""Fault (b): the extender is SIGKILLed while a writer is binding pods, then restarted on
the same ledger. Every bind that got a success reply has exactly one active ledger row,
no pod has two, the restarted extender re-reserves exactly what the ledger holds, and
a bind whose reply was lost in the crash can be retried without doubling anything."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import httpx
import pytest

from extender.ledger import open_ledger
from extender.wire.clock import SystemClock
from tests.serveproc import ServeProc
from tests.support import gpu_pod

NODES = [f"gpu-{i}" for i in range(4)]


class Writer(threading.Thread):
    """Binds fresh 1 GiB pods back to back, like kube-scheduler's binding cycle, and
    keeps what each pod's bind got: "ok", "refused" (protocol Error) or "lost" (no reply)."""

    def __init__(self, serve: ServeProc, name: str) -> None:
        super().__init__(daemon=True)
        self.serve, self.prefix = serve, name
        self.outcome: dict[str, str] = {}
        self.stop = threading.Event()
        self.i = 0

    def run(self) -> None:
        with httpx.Client(base_url=self.serve.url, timeout=10) as c:
            while not self.stop.is_set():
                self.i += 1
                uid = f"{self.prefix}-{self.i}"
                self.outcome[uid] = bind_pod(c, uid)

    def count(self, what: str) -> int:
        return sum(1 for v in list(self.outcome.values()) if v == what)


def bind_pod(c: httpx.Client, uid: str, node: str | None = None) -> str:
    pod = gpu_pod(uid, memory="1Gi", uid=uid)
    try:
        r = c.post("/filter", json={"Pod": pod, "NodeNames": NODES})
        passing = r.json().get("NodeNames") or []
        if r.status_code != 200 or not passing:
            return "refused"
        r = c.post(
            "/bind",
            json={
                "PodName": uid,
                "PodNamespace": "ml",
                "PodUID": uid,
                "Node": node or passing[int(uid.rsplit("-", 1)[1]) % len(passing)],
            },
        )
    except httpx.TransportError:
        return "lost"
    try:
        return "ok" if r.status_code == 200 and r.json()["Error"] == "" else "refused"
    except ValueError:
        return "lost"


def wait_for(cond: object, what: str, timeout: float = 60) -> None:
    ev = threading.Event()
    for _ in range(int(timeout * 20)):
        if cond():  # type: ignore[operator]
            return
        ev.wait(0.05)
    pytest.fail(f"timed out waiting for {what}")


def test_sigkill_under_binds_loses_and_doubles_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.db")
    serve = ServeProc(tmp_path, db, ["--stale-after", "600", "--policy", "spread"])
    serve.start()
    writers = [Writer(serve, "a"), Writer(serve, "b")]
    try:
        for n in NODES:
            serve.report(n)
        for w in writers:
            w.start()
        wait_for(lambda: sum(w.count("ok") for w in writers) >= 40, "40 binds before the kill")
        serve.kill()  # the writers are mid-request
        before_kill = sum(w.count("ok") for w in writers)
        serve.start()
        for n in NODES:
            serve.report(n)  # agents report again; reservations come from the ledger
        wait_for(
            lambda: sum(w.count("ok") for w in writers) >= before_kill + 40,
            "40 binds after the restart",
        )
    finally:
        for w in writers:
            w.stop.set()
        for w in writers:
            w.join(15)

    outcome = {uid: v for w in writers for uid, v in w.outcome.items()}
    ledger = open_ledger(db, SystemClock())
    try:
        active = Counter(a.pod.uid for a in ledger.active())
        acknowledged = {uid for uid, v in outcome.items() if v == "ok"}
        # no allocation lost: every acknowledged bind has its (single-GPU) row
        assert acknowledged <= set(active), sorted(acknowledged - set(active))[:5]
        # none doubled: one row per pod (1-GPU pods)
        assert all(n == 1 for n in active.values()), [u for u, n in active.items() if n > 1]
        # refused binds left nothing behind
        refused = {uid for uid, v in outcome.items() if v == "refused"}
        assert not refused & set(active)
        unacknowledged = set(active) - acknowledged
        assert unacknowledged <= {uid for uid, v in outcome.items() if v == "lost"}

        # the restarted extender holds exactly the ledger's reservations
        held: Counter[str] = Counter()
        for n in NODES:
            for g in serve.report(n).json().get("grants", []):
                held[g["pod_uid"]] += len(g["gpu_uuids"])
        assert held == active

        # kube-scheduler retries a bind whose reply was lost: it succeeds, nothing doubles
        with httpx.Client(base_url=serve.url, timeout=10) as c:
            for uid in sorted(unacknowledged):
                node = next(a.node.name for a in ledger.for_pod(uid))
                assert bind_pod(c, uid, node) == "ok"
        assert Counter(a.pod.uid for a in ledger.active()) == active
    finally:
        ledger.close()
        serve.stop()


def test_sigterm_right_after_binds_leaves_every_bound_status_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bind's bound status rides in a later transaction (extender/ledger/group.py); a
    clean shutdown commits the ones still waiting before the process exits."""
    monkeypatch.setenv("HEADROOM_LEDGER_RIDE_S", "60")  # the flusher would wait: not exit
    db = str(tmp_path / "ledger.db")
    serve = ServeProc(tmp_path, db, ["--stale-after", "600", "--policy", "spread"])
    serve.start()
    uids = [f"t-{i}" for i in range(6)]
    try:
        for n in NODES:
            serve.report(n)
        with httpx.Client(base_url=serve.url, timeout=10) as c:
            assert [bind_pod(c, uid) for uid in uids] == ["ok"] * len(uids)
        serve.stop()  # SIGTERM at once, while the last status may still be riding
        assert serve.proc is not None and serve.proc.returncode == 0, serve.log_tail()
    finally:
        serve.kill()
    ledger = open_ledger(db, SystemClock())
    try:
        assert {uid: [a.status.value for a in ledger.for_pod(uid)] for uid in uids} == {
            uid: ["bound"] for uid in uids
        }
    finally:
        ledger.close()
