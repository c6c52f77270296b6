"""Reordered candidates are answered from the shape's plan by their ids, exactly as a
fresh evaluation of the list would answer them, and any other list is evaluated."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec
import numpy as np
import pytest

from drivers.agent.loop import build_report
from drivers.gpu.simulated import SimulatedDriver
from extender.codec.namelists import ArgsDecoder, NameList
from extender.ledger import open_ledger
from extender.pricing import load_pricebook
from extender.scheduling.binder import InProcessBinder
from extender.scheduling.plans import Plans
from extender.scheduling.reorder import passing_positions, scores_by_id, scores_of
from extender.scheduling.service import SchedulingService, ServiceConfig
from extender.scoring import policy_by_name
from extender.state.inventory import Inventory
from extender.wire.clock import ManualClock
from extender.wire.protocol import encoder

NODES = [f"node-{i:02d}" for i in range(40)]
MANY = [f"node-{i:03d}" for i in range(300)]


def ints(*xs: int) -> np.ndarray:
    return np.array(xs, np.int64)


def test_passing_positions_of_a_permutation() -> None:
    where = ints(2, 0, 1, -1)  # ids 0..2 are the plan's positions 2, 0, 1; id 3 is not in it
    passed = ints(0, 2)  # the plan's positions 0 and 2 pass: ids 1 and 0
    assert passing_positions(where, ints(1, 2, 0), passed, 3).tolist() == [0, 2]
    assert passing_positions(where, ints(2, 0, 1), passed, 3).tolist() == [1, 2]
    for not_a_permutation in (
        ints(1, 2),
        ints(1, 1, 0),
        ints(1, 2, 3),
        ints(1, 2, 0, 9),
        ints(1, 2, 0, 0),
    ):
        assert passing_positions(where, not_a_permutation, passed, 3) is None


def test_scores_of_a_permutation_of_the_scored_nodes() -> None:
    by_id = scores_by_id(ints(4, 1), ints(7, 0), 6)
    assert by_id.tolist() == [-1, 0, -1, -1, 7, -1]
    assert scores_of(by_id, ints(1, 4), 2).tolist() == [0, 7]
    assert scores_of(by_id, ints(4, 1), 2).tolist() == [7, 0]
    for not_a_permutation in (ints(4), ints(4, 4), ints(4, 2), ints(4, 1, 9), ints(1, 4, 1)):
        assert scores_of(by_id, not_a_permutation, 2) is None


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[SchedulingService]:
    yield from service_of(tmp_path, NODES)


@pytest.fixture
def big(tmp_path: Path) -> Iterator[SchedulingService]:
    """300 nodes (long lists are read in row order) reporting in no particular order."""
    yield from service_of(tmp_path, random.Random(4).sample(MANY, len(MANY)))


def service_of(tmp_path: Path, nodes: Sequence[str]) -> Iterator[SchedulingService]:
    """Nodes reporting in this order, some too full for the 16Gi pods below (failure
    reasons), prices apart; its ledger writer closed after the test (nothing written
    once the log is gone)."""
    clock = ManualClock()
    svc = SchedulingService(
        Inventory(load_pricebook()),
        open_ledger(str(tmp_path / "l.db"), clock),
        InProcessBinder(),
        policy_by_name("headroom"),
        clock,
        ServiceConfig(stale_after=3600, narrow_epsilon=0.05),
    )
    for name in nodes:
        report_used(svc, name, 1024 * (int(name.split("-")[1]) % 12))
    yield svc
    svc.writer.close()


def report_used(svc: SchedulingService, name: str, mib: int) -> None:
    """The node ``node-<i>`` reports its one A10G with ``mib`` in use (its labels and GPU
    follow from i)."""
    i = int(name.split("-")[1])
    d = SimulatedDriver("1xA10G:24Gi", seed=i, node=name, clock=svc.clock)
    d.start_process("hog", d.gpu_uuids[0], mib)
    labels = {
        "node.kubernetes.io/instance-type": ("g5.xlarge", "g5.2xlarge")[i % 2],
        "karpenter.sh/capacity-type": ("spot", "on-demand")[i % 3 == 0],
    }
    svc.report(build_report(d, name, d.attribute, svc.clock, labels=labels))


def pod(uid: str, memory: str = "16Gi") -> dict:
    return {
        "metadata": {
            "name": uid,
            "namespace": "t",
            "uid": uid,
            "annotations": {"headroom.dev/gpu-memory": memory},
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


class Asker:
    """filter and prioritize as the server calls them (lists read by id, the filter's
    passing list expected back), each reply as kube-scheduler reads it; ``planned``
    counts the lists the service made or looked up a plan for.

    The service's own answer to a reordered list is under test, so by default the
    decoder does not hand back a kept list for one of the same names (``by_set``: it
    does in the server, see ``ArgsDecoder.names``)."""

    def __init__(
        self, svc: SchedulingService, monkeypatch: pytest.MonkeyPatch, by_set: bool = False
    ) -> None:
        self.svc, self.decoder, self.planned = svc, ArgsDecoder(index=svc.names), 0
        self.memory = "16Gi"  # every pod's ask
        if not by_set:
            monkeypatch.setattr(svc.names, "fingerprint", lambda data: None)
        real = svc._plan

        def counted(*args: object) -> object:
            self.planned += 1
            return real(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(svc, "_plan", counted)

    def args(self, uid: str, names: Sequence[str]) -> object:
        return self.decoder.decode(
            msgspec.json.encode(
                {"Pod": pod(uid, self.memory), "Nodes": None, "NodeNames": list(names)}
            )
        )

    def filter(self, uid: str, names: Sequence[str]) -> tuple[dict, NameList]:
        result, _ = self.svc.filter(self.args(uid, names))  # type: ignore[arg-type]
        assert isinstance(result.NodeNames, NameList)
        self.decoder.expect(result.NodeNames)
        return msgspec.json.decode(encoder.encode(result)), result.NodeNames

    def prioritize(self, uid: str, names: Sequence[str]) -> list:
        return msgspec.json.decode(self.svc.prioritize(self.args(uid, names)))  # type: ignore[arg-type]

    def fresh(self, verb: str, uid: str, names: Sequence[str]) -> object:
        """The same ask with no plan kept: every node evaluated afresh (and the plans
        kept before back after it)."""
        kept, self.svc.plans = self.svc.plans, Plans(self.svc.names)
        answer = getattr(self, verb)(uid, names)
        self.svc.plans = kept
        return answer[0] if verb == "filter" else answer


def test_reordered_lists_are_answered_as_a_fresh_evaluation_would(
    svc: SchedulingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    ask, rng = Asker(svc, monkeypatch), random.Random(5)
    for i in range(6):
        ask.filter(f"warm-{i}", NODES)  # the shape's plan, for the list in its own order
        order = rng.sample(NODES, len(NODES))
        planned = ask.planned
        reply, passing = ask.filter(f"p{i}", order)
        scores = ask.prioritize(f"p{i}", passing)  # the filter's passing list, echoed
        backwards = sorted(passing, reverse=True)  # never the plan's own order (ascending)
        again = ask.prioritize(f"p{i}", backwards)  # the same nodes, read anew
        assert ask.planned == planned  # answered from the plan: no plan for these lists
        assert reply["FailedNodes"] and len(passing) > 1  # something to reorder on each side
        assert reply["NodeNames"] == [n for n in order if n in set(passing)]
        assert reply == ask.fresh("filter", f"p{i}", order)
        assert scores == ask.fresh("prioritize", f"p{i}", list(passing))
        assert again == ask.fresh("prioritize", f"p{i}", backwards)


def test_lists_that_are_not_reorderings_are_evaluated(
    svc: SchedulingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    ask = Asker(svc, monkeypatch)
    _, passing = ask.filter("p", NODES)
    shuffled = NODES[::-1]
    cases = {
        "filter": [shuffled[:-1], [*shuffled[:-1], "node-new"], [*shuffled[:-1], shuffled[0]]],
        "prioritize": [list(passing)[1:], [*passing, NODES[0]], [*list(passing)[1:], passing[1]]],
    }
    for verb, lists in cases.items():
        for names in lists:
            ask.filter("p", NODES)
            planned = ask.planned
            answer = getattr(ask, verb)("p", names)
            assert ask.planned == planned + 1, (verb, names)  # evaluated as the list it is
            assert (answer[0] if verb == "filter" else answer) == ask.fresh(verb, "p", names)


def test_the_plans_own_passing_list_keeps_its_reply(
    svc: SchedulingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The filter's passing list echoed in the plan's own order (replicas in a row) is
    answered by the plan path, whose reply is kept: the second ask gets the very bytes."""
    ask = Asker(svc, monkeypatch)
    _, passing = ask.filter("p", NODES)
    first = svc.prioritize(ask.args("p", passing))  # type: ignore[arg-type]
    assert svc.prioritize(ask.args("q", passing)) is first  # type: ignore[arg-type]


def test_a_new_shape_passing_the_nodes_another_passed_is_scored_from_its_plan(
    svc: SchedulingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pods of new shapes often pass the very nodes an earlier pod passed, and the decoder
    then hands prioritize the earlier pod's list (the same bytes, the object kept first).
    It is still the filter's own passing list: scored from the plan's arrays (no plan
    made for it, no table by id), as a fresh evaluation scores it."""
    ask = Asker(svc, monkeypatch)
    monkeypatch.setattr(svc, "_passing_scores", lambda *a: pytest.fail("scored by id"))
    first: NameList | None = None
    for i, memory in enumerate(["16Gi", "16400Mi", "16500Mi", "16600Mi"]):
        ask.memory = memory
        _, passing = ask.filter(f"p{i}", NODES)
        first = first or passing
        assert passing is first and len(passing) > 1  # the same nodes: the list made first
        echoed = ask.args(f"p{i}", passing).NodeNames  # type: ignore[attr-defined]
        assert echoed.ids is first.ids  # the first pod's list, not this one's
        planned = ask.planned
        scores = ask.prioritize(f"p{i}", passing)
        assert ask.planned == planned  # answered with the filter's plan, none made
        assert scores == ask.fresh("prioritize", f"p{i}", list(passing))


def test_a_scores_reply_is_written_once_for_the_same_nodes_and_scores(
    svc: SchedulingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same nodes (by ids) with the same integer scores give the reply already
    written; other scores give their own reply, each score with its node."""
    _, passing = Asker(svc, monkeypatch).filter("p", NODES)
    scores = np.arange(len(passing), dtype=np.int64) % 11
    first = svc._scores_reply(passing, scores)
    assert svc._scores_reply(passing.keyed("another"), scores.copy()) is first
    moved = (scores + 1) % 11
    other = svc._scores_reply(passing, moved)
    assert other is not first
    assert msgspec.json.decode(other) == [
        {"Host": n, "Score": int(s)} for n, s in zip(passing, moved, strict=True)
    ]


def test_a_long_list_read_in_row_order_gets_the_answer_of_list_order(
    big: SchedulingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nodes reported in another order than the scheduler lists them: the columns are
    read in row order and the answers put back in list order, the very replies of
    reading them in list order."""
    ask = Asker(big, monkeypatch)
    cols = big.inventory.columns()
    assert cols.ascending(cols.rows(MANY)) is not None  # rows are not in list order
    for memory in ("16Gi", "4Gi", "20Gi"):
        ask.memory = memory
        reply, passing = ask.filter(memory, MANY)
        scores = ask.prioritize(memory, passing)
        with monkeypatch.context() as in_list_order:
            in_list_order.setattr(cols, "ascending", lambda rows: None)
            assert reply == ask.fresh("filter", memory, MANY)
            assert scores == ask.fresh("prioritize", memory, list(passing))


def test_the_server_answers_a_reordered_list_as_the_list_it_reorders(
    svc: SchedulingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the server decodes them, the same candidates in a new order are the list kept
    before: no plan looked up, the very reply of the plan (its order), which passes and
    fails exactly the nodes a fresh evaluation of the new order does; prioritize then
    gets the plan's own passing list back."""
    ask, rng = Asker(svc, monkeypatch, by_set=True), random.Random(9)
    ask.filter("warm", NODES)
    for i in range(4):
        order = rng.sample(NODES, len(NODES))
        planned = ask.planned
        reply, passing = ask.filter(f"p{i}", order)
        assert ask.planned == planned + 1  # the kept list's plan: taken, not made
        fresh = ask.fresh("filter", f"p{i}", order)
        assert set(reply["NodeNames"]) == set(fresh["NodeNames"]) and len(passing) > 1
        assert reply["FailedNodes"] == fresh["FailedNodes"] and reply["FailedNodes"]
        assert reply["NodeNames"] == [n for n in NODES if n in set(passing)]  # kept order
        scores = ask.prioritize(f"p{i}", passing)
        assert sorted(scores, key=str) == sorted(
            ask.fresh("prioritize", f"p{i}", list(passing)), key=str
        )
