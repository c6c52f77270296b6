"""Request plans answer exactly what a fresh evaluation of every node would, whatever
happened in between (reports, binds, releases, staleness, taints, NodeClaims)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from drivers.agent.loop import build_report
from drivers.gpu.simulated import SimulatedDriver
from extender.ledger import open_ledger
from extender.pricing import load_pricebook
from extender.scheduling.binder import InProcessBinder
from extender.scheduling.plans import Plans
from extender.scheduling.service import SchedulingService, ServiceConfig
from extender.scoring import policy_by_name
from extender.state.inventory import Inventory
from extender.state.nodefacts import facts_from_labels
from extender.wire.clock import ManualClock
from extender.wire.protocol import ExtenderArgs, ExtenderBindingArgs
from tests.wire_client import WireClient

NODES = [f"n{i}" for i in range(6)]
SHAPES = ["4Gi", "12Gi", None]

op = st.one_of(
    st.tuples(st.just("use"), st.integers(0, 5), st.integers(0, 3), st.integers(0, 20)),
    st.tuples(st.just("report"), st.integers(0, 5), st.just(0), st.just(0)),
    st.tuples(st.just("bind"), st.integers(0, 5), st.integers(0, 2), st.integers(0, 10_000)),
    st.tuples(st.just("release"), st.integers(0, 10_000), st.just(0), st.just(0)),
    st.tuples(st.just("time"), st.integers(1, 40), st.just(0), st.just(0)),
    st.tuples(st.just("taint"), st.integers(0, 5), st.booleans(), st.just(0)),
    st.tuples(st.just("drain"), st.integers(0, 5), st.booleans(), st.just(0)),
    st.tuples(st.just("leave"), st.integers(0, 5), st.just(0), st.just(0)),  # "report": back
)


def pod(uid: str, memory: str | None) -> dict:
    ann = {"headroom.dev/gpu-memory": memory} if memory else {}
    return {
        "metadata": {"name": uid, "namespace": "t", "uid": uid, "annotations": ann},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


def replies(
    svc: SchedulingService, shape: str | None, fresh: bool = False, client: WireClient | None = None
) -> list[object]:
    """filter, then prioritize with the nodes filter passed (as kube-scheduler does),
    with every node, and with some of them; ``fresh``: each from an empty plan cache.
    As kube-scheduler reads them: lists in order, failure reasons as maps (a reordered
    list's reasons come in its plan's order)."""

    wire = client or WireClient(svc)

    def ask(names: Sequence[str]) -> ExtenderArgs:  # as the server decodes: lists interned
        return wire.args(pod(f"q-{shape}", shape), names)

    out: list[object] = []
    passing: Sequence[str] = []
    rotated = NODES[2:] + NODES[:2]  # kube-scheduler's lists are permutations too
    steps: list[tuple[str, Sequence[str]]] = [
        ("prioritize", NODES),
        ("filter", NODES),
        ("prioritize", NODES),
        ("prioritize", NODES[1:4]),
        ("passing", []),
        ("prioritize", NODES[::-1]),
        ("filter", rotated),
        ("passing", []),
        # a node dropped by kube-scheduler's own filters (it filled up): a list not seen
        # before, all in the widest plan, which answers it
        ("filter", NODES[:2] + NODES[3:]),
        ("passing", []),
    ]
    for verb, names in steps:
        if fresh:
            svc.cycle.plans = Plans()
        if verb == "filter":
            reply, passing = wire.filter(ask(names))
            out.append(reply)
            continue
        names = passing if verb == "passing" else names
        out.append(wire.prioritize(ask(names)))
    return out


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(op, min_size=1, max_size=25))
# every agent silent past stale_after, then one back with the same numbers (no change
# logged): the cached plans, the subset prioritize took from filter's too, re-check it
@example(ops=[("time", 40, 0, 0), ("time", 40, 0, 0), ("report", 1, 0, 0)])
# a node leaves and another takes its row, then the first comes back on a new one
@example(ops=[("leave", 1, 0, 0), ("use", 2, 0, 9), ("report", 1, 0, 0), ("use", 1, 1, 20)])
def test_plans_match_a_fresh_evaluation(tmp_path: Path, ops: list[tuple]) -> None:
    clock = ManualClock()
    ledger = open_ledger(str(tmp_path / f"l{abs(hash(tuple(ops)))}.db"), clock)
    svc = SchedulingService(
        Inventory(load_pricebook()),
        ledger,
        InProcessBinder(),
        policy_by_name("headroom"),
        clock,
        ServiceConfig(stale_after=60, narrow_epsilon=0.02),
    )
    drivers = {
        n: SimulatedDriver("2xA10G:24Gi,1xL4:24Gi", seed=i, node=n, clock=clock)
        for i, n in enumerate(NODES)
    }
    labels = {
        "node.kubernetes.io/instance-type": "g5.12xlarge",
        "karpenter.sh/capacity-type": "spot",
    }

    def report(n: str) -> None:
        d = drivers[n]
        svc.report(build_report(d, n, d.attribute, clock, labels=labels))
        svc.refresh()  # as the server does once the report is answered (shapes used lately)

    for n in NODES:
        report(n)
    bound: list[str] = []
    for kind, a, b, c in ops:
        if kind == "use":
            d = drivers[NODES[a]]
            d.end_pod("hog")
            if c:
                d.start_process("hog", d.gpu_uuids[b % 3], c * 1024)
            report(NODES[a])
        elif kind == "report":
            report(NODES[a])
        elif kind == "bind":
            uid = f"p{c}"
            replies(svc, SHAPES[b])  # filter first, as kube-scheduler does
            svc.filter(WireClient(svc).args(pod(uid, SHAPES[b]), NODES))
            if not svc.bind(ExtenderBindingArgs(uid, "t", uid, NODES[a])).Error:
                bound.append(uid)
        elif kind == "release" and bound:
            svc.release(bound.pop(a % len(bound)), "completed")
        elif kind == "time":
            clock.advance(a)
        elif kind == "taint":
            taints = ("karpenter.sh/disrupted",) if b else ()
            svc.inventory.update_facts(facts_from_labels(NODES[a], labels, taints))
        elif kind == "drain":
            svc.inventory.set_draining(NODES[a], bool(b))
        elif kind == "leave":  # the Node was deleted; its row is freed for the next to come
            svc.inventory.remove_node(NODES[a])
        for shape in SHAPES:
            cached = replies(svc, shape)
            kept = svc.cycle.plans
            assert replies(svc, shape, fresh=True) == cached, (kind, a, b, c, shape)
            svc.cycle.plans = kept
    svc.writer.close()
    ledger.close()


def test_plans_are_kept_for_a_bounded_number_of_shapes() -> None:
    """Shapes change for good (the workload-mix version is part of each): a shape's
    widest plan, a whole candidate list's arrays, is kept for the latest shapes only."""
    import numpy as np

    from extender.scheduling.plans import Outcome, Source

    def evaluate(names: Sequence[str], rows: object) -> Outcome:
        n = len(names)
        return Outcome(
            np.ones(n, dtype=bool),
            np.zeros(n),
            np.zeros(n),
            np.full(n, 5.0),
            {},
            np.arange(n, dtype=np.int64),
            0,
        )

    plans = Plans(capacity=4)
    names = [f"n{i}" for i in range(50)]

    src = Source(6.0, 1, lambda plan: np.zeros(0, np.int64), evaluate, 60.0)

    def parent(shape: int) -> object:
        return plans.parent(shape, src)

    for shape in range(100):
        plans.plan(names, shape, src)
        assert parent(shape) is not None
    assert len(plans._last) == 4 and parent(0) is None and parent(99) is not None
