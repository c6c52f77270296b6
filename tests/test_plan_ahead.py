"""A pod the pod watch announces gets its plan made on the event loop before its filter
comes: the filter then makes no pass over the candidates, and answers exactly what it
answers without the announcement. Over real HTTP to a running extender, the
announcement made from another thread, as the watch makes it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from extender.ledger.metrics import REGISTRY
from extender.scheduling.announced import Announced
from extender.state.demand import GpuDemand
from extender.wire.protocol import Pod
from tests.support import Extender, gpu_pod, running_extender

NODES = [f"node-{i:02d}" for i in range(24)]


def passes(when: str) -> float:
    value = REGISTRY.get_sample_value("headroom_scheduling_passes_total", {"when": when})
    return value or 0.0


def as_pod(body: dict[str, Any]) -> Pod:
    return msgspec.convert(body, Pod)


def wait_ahead(count: float, timeout: float = 10.0) -> None:
    """Until ``count`` plans have been made ahead (on the server's event loop)."""
    end = time.monotonic() + timeout
    while passes("ahead") < count:
        if time.monotonic() > end:
            raise AssertionError("no plan was made ahead")
        time.sleep(0.005)


@contextlib.contextmanager
def filled(path: Path, **settings: Any) -> Iterator[Extender]:
    """A running extender whose nodes report several fill levels and prices, so answers
    differ from node to node."""
    path.mkdir(exist_ok=True)
    with running_extender(path, **settings) as ext:
        for i, name in enumerate(NODES):
            ext.add_node(name, capacity_type=("spot", "on-demand")[i % 3 == 0], seed=i)
            fill(ext, name, i)
        yield ext


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Extender]:
    with filled(tmp_path, narrowing=False) as ext:
        yield ext


def fill(ext: Extender, name: str, i: int) -> None:
    """Node i's GPUs in use by i's pattern: every third node full (no 1-GPU pod over
    4 GiB fits there), the others one GPU partly used."""
    d = ext.drivers[name]
    for k, uuid in enumerate(d.gpu_uuids):
        if i % 3 == 0 or k == i % 4:
            d.start_process(f"hog-{k}", uuid, 21 * 1024 if i % 3 == 0 else 1024 * (i % 7) * 3)
    ext.report(name)


def filtered(ext: Extender, pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    r = ext.post("filter", ext.schedule_args(pod, names))
    r.raise_for_status()
    reply: dict[str, Any] = r.json()
    return reply


def announce(ext: Extender, pod: dict[str, Any]) -> bool:
    """As the pod watch does: from a thread of its own."""
    taken: list[bool] = []
    t = threading.Thread(target=lambda: taken.append(ext.built.service.announce(as_pod(pod))))
    t.start()
    t.join()
    return taken[0]


def prepared(ext: Extender, pod: dict[str, Any]) -> None:
    """Announced, and its plan made (on the server's event loop)."""
    made = passes("ahead")
    assert announce(ext, pod)
    wait_ahead(made + 1)


def test_an_announced_pod_finds_its_plan_made(fleet: Extender) -> None:
    filtered(fleet, gpu_pod("first", memory="6Gi"), NODES)  # the latest candidate list
    pod = gpu_pod("second", memory="7Gi", uid="uid-second")  # a shape not seen before
    ahead, cycle = passes("ahead"), passes("cycle")
    assert announce(fleet, pod)
    wait_ahead(ahead + 1)
    reply = filtered(fleet, pod, NODES[::-1])  # kube-scheduler's lists come permuted
    assert passes("cycle") == cycle  # the filter made no pass of its own
    assert reply["NodeNames"] and reply["FailedNodes"]  # an answer with both sides


def test_the_prepared_answer_is_the_unannounced_answer(tmp_path: Path) -> None:
    """Two extenders with the same nodes, one told of the pod ahead: the same bytes."""
    replies = []
    for ahead in (True, False):
        with filled(tmp_path / str(ahead), narrowing=False) as ext:
            filtered(ext, gpu_pod("first", memory="5Gi"), NODES)
            pod = gpu_pod("second", gpus=2, memory="9Gi")
            before = passes("cycle")
            if ahead:
                prepared(ext, pod)
            r = ext.post("filter", ext.schedule_args(pod, NODES))
            r.raise_for_status()
            assert passes("cycle") == before + (0 if ahead else 1)
            replies.append(r.content)
    assert replies[0] == replies[1]
    reply = msgspec.json.decode(replies[0])
    assert reply["NodeNames"] and reply["FailedNodes"]


def test_a_list_that_lost_nodes_is_answered_from_the_plan_made_ahead(tmp_path: Path) -> None:
    """kube-scheduler's list once nodes filled up (their GPUs counted as requested): the
    plan made ahead for the whole list answers it, with no pass, byte for byte as an
    extender told nothing ahead answers it afresh."""
    shorter = [n for i, n in enumerate(NODES) if i % 5 != 2][::-1]  # permuted, too
    replies, cycles = [], []
    for ahead in (True, False):
        with filled(tmp_path / str(ahead), narrowing=False) as ext:
            filtered(ext, gpu_pod("first", memory="5Gi"), NODES)
            pod = gpu_pod("second", memory="10Gi")
            if ahead:
                prepared(ext, pod)
            cycle = passes("cycle")
            for verb in ("filter", "prioritize"):
                r = ext.post(verb, ext.schedule_args(pod, shorter))
                r.raise_for_status()
                replies.append(r.content)
            cycles.append(passes("cycle") - cycle)
    assert cycles == [0, 1]
    assert replies[:2] == replies[2:]
    assert msgspec.json.decode(replies[0])["FailedNodes"]


def test_answers_are_the_filters_own_across_a_workload_mix_publication(tmp_path: Path) -> None:
    """Each pod announced (and prepared) before the previous pod's filter, for more pods
    than the workload mix takes between publications (50): the replies are byte for
    byte those of an extender told nothing ahead, and the plans made ahead are used."""
    pods = [gpu_pod(f"p{k}", memory=f"{2048 + 64 * k}Mi", uid=f"uid-p{k}") for k in range(56)]
    replies: dict[bool, list[bytes]] = {}
    for ahead in (True, False):
        with filled(tmp_path / str(ahead)) as ext:  # scores narrow the filter
            got = replies[ahead] = []
            cycle = passes("cycle")
            for k, pod in enumerate(pods):
                if ahead and k + 1 < len(pods) and k:
                    prepared(ext, pods[k + 1])
                for verb in ("filter", "prioritize"):  # scores: the mix's F in each
                    r = ext.post(verb, ext.schedule_args(pod, NODES))
                    r.raise_for_status()
                    got.append(r.content)
            if ahead:  # pods 0 and 1 came before anything was announced, and pod 50
                # was prepared before pod 49's filter, whose arrival (the 50th) moved the
                # mix: the rest found their plans made
                assert passes("cycle") == cycle + 3
    assert replies[True] == replies[False]


def test_nothing_is_prepared_before_a_filter_for_other_profiles_or_when_off(
    tmp_path: Path,
) -> None:
    for plan_ahead in (4, 0):
        (tmp_path / str(plan_ahead)).mkdir()
        with running_extender(tmp_path / str(plan_ahead), plan_ahead=plan_ahead) as ext:
            for i, name in enumerate(NODES[:4]):
                ext.add_node(name, seed=i)
            assert not announce(ext, gpu_pod("early", memory="3Gi"))  # no filter yet
            filtered(ext, gpu_pod("first", memory="6Gi"), NODES[:4])
            made = passes("ahead")
            if not plan_ahead:  # HEADROOM_PLAN_AHEAD=0
                assert not announce(ext, gpu_pod("off", memory="5Gi"))
                continue
            assert not announce(ext, gpu_pod("cpu-only", gpus=0))
            bad = gpu_pod("bad", memory="lots")
            assert not announce(ext, bad)  # its filter says why
            assert filtered(ext, bad, NODES[:4])["Error"]
            other = gpu_pod("other", memory="7Gi")
            other["spec"]["schedulerName"] = "someone-else"  # never sent to this filter
            seen = gpu_pod("seen", memory="8Gi")
            filtered(ext, seen, NODES[:4])  # its filter came first
            for pod in (other, seen, gpu_pod("ours", memory="9Gi")):
                assert announce(ext, pod)
            wait_ahead(made + 1)
            time.sleep(0.1)  # time for a wrong second one
            assert passes("ahead") == made + 1


class Loop:
    """A stand-in for ``call_soon_threadsafe``: the posted calls, run when told."""

    def __init__(self) -> None:
        self.posted: list[Callable[[], None]] = []
        self.closed = False

    def post(self, call: Callable[[], None]) -> None:
        if self.closed:
            raise RuntimeError("Event loop is closed")
        self.posted.append(call)

    def run(self) -> None:
        while self.posted:
            self.posted.pop(0)()


class Prepared:
    """A stand-in for ``Cycle.prepare``: which pods it was given; a pod named "boom"
    fails, one named "no" is declined."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, pod: Pod, demand: GpuDemand) -> bool:
        if pod.metadata.name == "boom":
            raise ValueError("boom")
        self.names.append(pod.metadata.name)
        return pod.metadata.name != "no"


def gpu(name: str, gib: int) -> Pod:
    return as_pod(gpu_pod(name, memory=f"{gib}Gi", uid=f"uid-{name}"))


def test_shapes_wait_once_each_oldest_first_at_most_limit() -> None:
    prepared, loop, clock = Prepared(), Loop(), [0.0]
    ann = Announced(prepared, lambda: clock[0], limit=2)
    ann.serve_on(loop.post)
    pods = [gpu(f"p{i}", gib) for i, gib in enumerate((3, 3, 4, 5))]
    assert [ann.put(p) for p in pods] == [True, False, True, False]  # p1: p0's shape
    assert len(loop.posted) == 1  # one drain posted, however many wait
    loop.run()
    assert prepared.names == ["p0", "p2"]
    assert ann.put(pods[3]) and ann.put(gpu("p4", 6))  # two more wait ...
    loop.run()
    assert prepared.names == ["p0", "p2"]  # ... while two prepared wait for their filter
    ann.filtered("uid-p0")  # one came: one more is prepared
    loop.run()
    assert prepared.names == ["p0", "p2", "p3"]
    clock[0] = 11.0  # past the window: the filters that never came count no more
    assert ann.put(gpu("p5", 7))  # (a put wakes the drain, which drops them)
    loop.run()
    assert prepared.names == ["p0", "p2", "p3", "p4", "p5"]


def test_declined_failed_and_moved_or_closed_loops() -> None:
    prepared, loop = Prepared(), Loop()
    ann = Announced(prepared, lambda: 0.0, limit=3)
    assert not ann.put(gpu("early", 3))  # no loop yet: no filter has come
    ann.serve_on(loop.post)
    for pod in (gpu("boom", 3), gpu("no", 4), gpu("ok", 5)):
        assert ann.put(pod)
    loop.run()
    assert prepared.names == ["no", "ok"]  # "no" declined holds no place: "ok" made
    assert ann.put(gpu("waits", 6)) and ann.put(gpu("waits-too", 7))
    stale = Loop()  # the drain went to a loop that never runs it; filters moved on
    loop.posted.clear()
    ann.serve_on(stale.post)
    ann.filtered("uid-ok")
    stale.run()
    assert prepared.names == ["no", "ok", "waits", "waits-too"]
    stale.closed = True  # shutting down: not taken, and nothing waits after
    ann.filtered("uid-waits")
    assert not ann.put(gpu("late", 8))
    stale.closed = False
    assert ann.put(gpu("late", 8))
    stale.run()
    assert prepared.names[-1] == "late"
