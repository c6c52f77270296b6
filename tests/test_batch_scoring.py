"""Scoring a batch of nodes at once gives exactly what scoring each node gives.

The per-node policies (place + score) are the reference, and for the two FGD policies,
whose per-node and batch paths both run ``scoring.fragmentation``, the plain-Python
oracle ``tests/fragmentation_reference.py`` is; ``evaluate_batch`` is what the
filter runs on thousands of nodes. Any difference, even in the last bit of a raw score,
could flip a tie and move a pod, so equality is exact, for every policy, random nodes
(mixed GPU sizes, busy/idle/reserved GPUs, MIG instances beside plain GPUs, spot and
on-demand) and random demands and workload mixes.
"""

from __future__ import annotations

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.scoring import POLICIES, Context, Limits, evaluate, place, policy_by_name
from extender.scoring.batch import ROW_FIELDS, GpuBatch
from extender.scoring.fit import fitting_gpus
from extender.scoring.framework import evaluate_batch, evaluate_rows
from extender.scoring.model import GpuView, NodeView
from extender.scoring.policy import Shape
from extender.state.columns import NodeColumns
from extender.state.columns import _ascending as columns_ascending
from extender.state.demand import CapacityPref, GpuDemand
from tests import fragmentation_reference as ref

TOTALS = [16_384, 24_576, 46_068, 81_920]
MEMS = [None, 512, 4096, 8192, 10_000, 16_384, 24_000, 40_000]


@st.composite
def gpu(draw: st.DrawFn, index: int) -> GpuView:
    total = draw(st.sampled_from(TOTALS))
    reserved = draw(st.sampled_from([0, 0, 512, 2048, 8192, total]))
    used = draw(st.sampled_from([0, 300, 1024, 1500, 6000, 20_000, total]))
    mig = draw(st.sampled_from(["", "", "", "", "1g.10gb"]))
    committed = max(used, reserved)
    model = draw(st.sampled_from(["X", "X", "Y"]))
    return GpuView(f"GPU-{index}", index, model, total, committed, reserved, mig)


@st.composite
def node(draw: st.DrawFn, i: int) -> NodeView:
    count = draw(st.integers(0, 8))
    order = draw(st.permutations(range(count)))  # agents may list GPUs in any order
    gpus = tuple(draw(gpu(j)) for j in order)
    capacity = draw(st.sampled_from(["spot", "on-demand", ""]))
    cpu = draw(st.sampled_from([0, 8000, 32_000]))  # 0: allocatable not known
    mem = draw(st.sampled_from([0, 65_536]))
    return NodeView(
        f"n{i}",
        gpus,
        capacity,
        "g5.12xlarge",
        0.01,
        version=1,
        cpu_allocatable_milli=cpu,
        cpu_requested_milli=draw(st.sampled_from([0, 2000, 7000, cpu])),
        memory_allocatable_mib=mem,
        memory_requested_mib=draw(st.sampled_from([0, 30_000, mem])),
    )


HOST_CPU = [0, 0, 1000, 4000, 12_000]
HOST_MEM = [0, 0, 8192, 40_000]
MODELS = [frozenset(), frozenset(), frozenset({"X"}), frozenset({"Y", "Z"})]


demands = st.builds(
    GpuDemand,
    count=st.integers(1, 4),
    memory_mib=st.sampled_from(MEMS),
    capacity=st.sampled_from(list(CapacityPref)),
    cpu_milli=st.sampled_from(HOST_CPU),
    host_memory_mib=st.sampled_from(HOST_MEM),
)
shapes = st.one_of(
    st.tuples(st.integers(1, 3), st.sampled_from(MEMS), st.sampled_from(["", "", "2g.20gb"])),
    st.builds(
        Shape,
        st.integers(1, 3),
        st.sampled_from(MEMS),
        st.just(""),
        st.sampled_from(HOST_CPU),
        st.sampled_from(HOST_MEM),
        st.sampled_from(MODELS),
    ),
)
mixes = st.lists(
    st.tuples(shapes, st.floats(0.01, 1.0)),
    min_size=1,
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.integers(1, 12).flatmap(lambda n: st.tuples(*(node(i) for i in range(n)))),
    demand=demands,
    mix=mixes,
    policy=st.sampled_from(sorted(POLICIES)),
    margin=st.sampled_from([0, 512]),
)
def test_batch_equals_per_node(
    nodes: tuple[NodeView, ...],
    demand: GpuDemand,
    mix: list[tuple[Shape, float]],
    policy: str,
    margin: int,
) -> None:
    total = sum(p for _, p in mix)
    ctx = Context(Limits(margin_mib=margin), tuple((s, p / total) for s, p in mix))
    pol = policy_by_name(policy)
    fits, raw = evaluate_batch(GpuBatch.from_views(nodes, ctx.limits), demand, pol, ctx)
    for i, view in enumerate(nodes):
        ev = evaluate(view, demand, pol, ctx)
        assert bool(fits[i]) == ev.fits, (view, demand)
        if ev.fits:
            assert raw[i] == ev.raw, (policy, view, demand, raw[i], ev.raw)
        # bind places without scoring: the same verdict, reason and GPUs
        placed = place(view, demand, pol, ctx)
        assert (placed.fits, placed.reason, placed.chosen) == (ev.fits, ev.reason, ev.chosen)


@settings(max_examples=300, deadline=None)
@given(
    view=node(0),
    demand=demands,
    mix=mixes,
    policy=st.sampled_from(["fgd", "headroom"]),
    margin=st.sampled_from([0, 512]),
)
def test_fgd_policies_equal_the_reference(
    view: NodeView, demand: GpuDemand, mix: list[tuple[Shape, float]], policy: str, margin: int
) -> None:
    """The GPUs FGD and headroom choose on a node and their raw scores equal the
    plain-Python oracle's exactly (the batch then equals these, above)."""
    total = sum(p for _, p in mix)
    ctx = Context(Limits(margin_mib=margin), tuple((s, p / total) for s, p in mix))
    ev = evaluate(view, demand, policy_by_name(policy), ctx)
    if ev.fits:
        fitting = fitting_gpus(view, demand, ctx.limits)
        chosen, want = ref.raw(policy, view, demand, fitting, ctx)
        assert ev.chosen == chosen and ev.raw == want, (view, demand, ev.raw, want)


def test_an_example_by_hand() -> None:
    """Two nodes, best fit: the one whose GPU the pod fills most scores higher."""
    lim = Limits(margin_mib=0)
    busy = NodeView("a", (GpuView("g0", 0, "A10G", 24_576, 16_384, 16_384),), "on-demand")
    empty = NodeView("b", (GpuView("g1", 0, "A10G", 24_576, 0),), "on-demand")
    full = NodeView("c", (GpuView("g2", 0, "A10G", 24_576, 24_000, 24_000),), "spot")
    fits, raw = evaluate_batch(
        GpuBatch.from_views([busy, empty, full], lim),
        GpuDemand(1, 8192),
        policy_by_name("binpack"),
        Context(lim),
    )
    assert fits.tolist() == [True, True, False]
    assert raw[0] == 1.0 and raw[1] == 8192 / 24_576
    assert np.isclose(raw[0], 0.5 * 1.0 + 0.5 * 1.0)


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.integers(1, 10).flatmap(lambda n: st.tuples(*(node(i) for i in range(n)))),
    picks=st.lists(st.integers(-1, 9), max_size=14),
    demand=demands,
    mix=mixes,
    policy=st.sampled_from(sorted(POLICIES)),
)
def test_rows_read_in_place_equal_the_taken_batch(
    nodes: tuple[NodeView, ...],
    picks: list[int],
    demand: GpuDemand,
    mix: list[tuple[Shape, float]],
    policy: str,
) -> None:
    """What the filter runs on the inventory's columns (rows in any order, repeated, -1
    for an unavailable node) equals ``evaluate_batch`` on those rows taken out."""
    total = sum(p for _, p in mix)
    ctx = Context(Limits(), tuple((s, p / total) for s, p in mix))
    pol = policy_by_name(policy)
    whole = GpuBatch.from_views(nodes, ctx.limits)
    rows = np.array([r if r < len(nodes) else -1 for r in picks], dtype=np.int64)
    fits, raw = evaluate_rows(whole, rows, demand, pol, ctx)
    live = rows[rows >= 0]
    want_fits, want_raw = evaluate_batch(whole.take(live), demand, pol, ctx)
    assert not fits[rows < 0].any() and (raw[rows < 0] == 0).all()
    assert fits[rows >= 0].tolist() == want_fits.tolist()
    assert raw[rows >= 0][want_fits].tolist() == want_raw[want_fits].tolist()


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.integers(1, 12).flatmap(lambda n: st.tuples(*(node(i) for i in range(n)))),
    demand=demands.filter(lambda d: d.count == 1),
    mix=mixes,
    policy=st.sampled_from(["fgd", "headroom"]),
    cut=st.integers(0, 700),
)
def test_rows_in_runs_read_as_rows_anywhere(
    nodes: tuple[NodeView, ...],
    demand: GpuDemand,
    mix: list[tuple[Shape, float]],
    policy: str,
    cut: int,
) -> None:
    """FGD for one unit reads a block of rows that runs consecutively as slices of the
    columns and gathers any other block: the same answer either way. 700 nodes (several
    blocks of 256), read from an offset, whole, and with one node unavailable."""
    total = sum(p for _, p in mix)
    ctx = Context(Limits(), tuple((s, p / total) for s, p in mix))
    pol = policy_by_name(policy)
    many = [views for _ in range(700 // len(nodes) + 1) for views in nodes][:700]
    whole = GpuBatch.from_views(many, ctx.limits)
    gap = np.arange(700, dtype=np.int64)
    gap[cut % 700] = -1
    for rows in (
        np.arange(cut % 700, 700, dtype=np.int64),
        np.arange(700, dtype=np.int64),
        gap,
        np.arange(700, dtype=np.int64)[::-1].copy(),
    ):
        fits, raw = evaluate_rows(whole, rows, demand, pol, ctx)
        live = rows[rows >= 0]
        want_fits, want_raw = evaluate_batch(whole.take(live), demand, pol, ctx)
        assert fits[rows >= 0].tolist() == want_fits.tolist()
        assert raw[rows >= 0][want_fits].tolist() == want_raw[want_fits].tolist()
        assert not fits[rows < 0].any()
        order = np.argsort(rows, kind="stable")  # read in row order, answered in list order
        assert [a.tolist() for a in evaluate_rows(whole, rows, demand, pol, ctx, order)] == [
            fits.tolist(),
            raw.tolist(),
        ]


def test_long_lists_are_read_in_row_order() -> None:
    """``NodeColumns.ascending``: for a long list's rows, the positions that read them in
    ascending order (None when in order already), until nodes get or lose rows."""
    cols = NodeColumns()
    names = [f"n{i}" for i in range(300)]
    for i in np.random.default_rng(3).permutation(300).tolist():  # reports in any order
        cols.write(
            NodeView(names[i], (GpuView(f"g{i}", 0, "A10G", 24_576, 0),), "spot"),
            1.0,
            True,
            stamp=i + 1,
        )
    rows = cols.rows(names)
    order = cols.ascending(rows)
    assert order is not None and rows[order].tolist() == sorted(rows.tolist())
    in_rows = sorted(names, key=lambda n: int(cols.rows([n])[0]))
    assert cols.ascending(cols.rows(in_rows)) is None
    assert cols.ascending(rows.copy()) is None  # not rows it returned
    cols.drop("n0")
    assert cols.ascending(rows) is None  # the layout changed: those rows are void


def test_inventory_columns_read_availability_and_prices() -> None:
    """``NodeColumns.read``: a node is live only if reported, fresh and schedulable, and
    only live nodes carry a price and a report time; ``whole`` sees every write; ``changed``
    finds the rows written since a change number, until rows come or go."""
    cols = NodeColumns()
    lim = Limits()
    for i, (at, ok) in enumerate([(100.0, True), (50.0, True), (100.0, False)]):
        gpus = (GpuView(f"g{i}", 0, "A10G", 24_576, 1000 * i),)
        cols.write(
            NodeView(f"n{i}", gpus, "spot", "g5.xlarge", 0.01 * (i + 1)), at, ok, stamp=i + 1
        )
    live, price, received = cols.read(cols.rows(["n0", "n1", "n2", "nope"]), 120.0, 30.0)
    assert live.tolist() == [cols.rows(["n0"])[0], -1, -1, -1]  # n1 stale, n2 unschedulable
    assert price[0] == 0.01 and np.isnan(price[1:]).all()
    assert received[0] == 100.0 and np.isnan(received[1:]).all()
    row = int(cols.rows(["n0"])[0])
    whole = cols.whole(lim)
    assert not whole.mig_busy[row]
    busy_mig = GpuView("m0", 1, "A100", 10_240, 5_000, 0, "1g.10gb")
    rows, layout = cols.rows(["n2", "n1", "n0"]), cols.layout
    written = cols.changed(rows, layout, since=1)
    assert written is not None and written.tolist() == [0, 1]  # n2, n1: written after 1
    cols.write(
        NodeView("n0", (GpuView("g0", 0, "A10G", 24_576, 20_000), busy_mig), "spot"),
        110.0,
        True,
        stamp=7,
    )
    written = cols.changed(rows, layout, since=3)
    assert written is not None and written.tolist() == [2]  # n0 again, at 7
    assert cols.whole(lim).committed[0, row] == 20_000 and cols.whole(lim).mig_busy[row]
    for i in range(3, 600):  # the columns grow: the batch is built again over the new ones
        cols.write(
            NodeView(f"n{i}", (GpuView(f"g{i}", 0, "A10G", 24_576, 0),), "spot"), 1.0, True, stamp=8
        )
    assert cols.changed(rows, layout, since=7) is None  # new rows: the old ones are void
    assert cols.whole(lim).total.shape[1] >= 600 and cols.whole(lim).mig_busy[row]


def test_rows_in_ascending_order_are_what_a_stable_sort_gives() -> None:
    """``NodeColumns`` places a list's rows in ascending order by a scatter over the row
    numbers; with unreported nodes (-1) and a node listed twice it is the stable sort."""
    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(2, 300))
        rows = rng.permutation(n + int(rng.integers(0, 50)))[:n].astype(np.int64)
        rows[rng.random(n) < 0.2] = -1
        if trial % 3 == 0:
            rows[1] = rows[0]
        got = columns_ascending(rows)
        if bool((rows[1:] >= rows[:-1]).all()):
            assert got is None
        else:
            assert got is not None and got.tolist() == np.argsort(rows, kind="stable").tolist()


# near-copies of a node, one column apart: ids that ignored a column would merge them
VARIANTS = [
    ("cpu_requested_milli", 1),
    ("memory_requested_mib", 1),
    ("memory_allocatable_mib", 65_537),
    ("cpu_allocatable_milli", 7999),
    ("allocatable", "cpu"),  # allocatable and requested one more: the same free
    ("allocatable", "memory"),
    ("capacity_type", "spot"),
    ("gpus", "committed"),
    ("gpus", "model"),
    ("gpus", "order"),
    ("gpus", "shift"),
]


UNIT = {"cpu": "milli", "memory": "mib"}
POOL = 3 + len(VARIANTS)  # three nodes drawn, then one variant each


def _variant(view: NodeView, edit: tuple[str, object]) -> NodeView:
    field, value = edit
    if field == "allocatable":
        kind = str(value)
        alloc, req = f"{kind}_allocatable_{UNIT[kind]}", f"{kind}_requested_{UNIT[kind]}"
        more = {alloc: getattr(view, alloc) + 1, req: getattr(view, req) + 1}
        return msgspec.structs.replace(view, **more)
    if field == "gpus":  # one GPU's committed memory or its split, the model, the order
        gpus = view.gpus
        if value == "committed" and gpus:
            last = gpus[-1]
            gpus = (*gpus[:-1], msgspec.structs.replace(last, committed_mib=last.committed_mib + 1))
        elif value == "shift" and len(gpus) > 1:  # 1 MiB moves: the node's sum is the same
            one, last = gpus[0], gpus[-1]
            gpus = (
                msgspec.structs.replace(one, committed_mib=one.committed_mib + 1),
                *gpus[1:-1],
                msgspec.structs.replace(last, committed_mib=last.committed_mib - 1),
            )
        elif value == "model":
            gpus = tuple(msgspec.structs.replace(g, model="Z") for g in gpus)
        else:  # the same GPUs at other indices: slots in another order
            at = [g.index for g in gpus][::-1]
            gpus = tuple(msgspec.structs.replace(g, index=i) for g, i in zip(gpus, at, strict=True))
        return msgspec.structs.replace(view, gpus=gpus)
    return msgspec.structs.replace(view, **{field: value})


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(
        # (a row by name: one of the pool's own or 12 more; a view of the pool, or a drop)
        st.tuples(st.integers(0, POOL + 11), st.one_of(st.none(), st.integers(0, POOL - 1))),
        max_size=60,
    ),
    pool=st.lists(node(0), min_size=3, max_size=3).map(
        lambda nodes: nodes + [_variant(nodes[k % 3], e) for k, e in enumerate(VARIANTS)]
    ),
)
def test_columns_give_equal_rows_one_state_id(
    ops: list[tuple[int, int | None]], pool: list[NodeView]
) -> None:
    """The state ids the scoring kernel copies answers by (``rowstates``), as the columns
    keep them through writes, rewrites and drops: rows with one id are equal in every
    column the kernel reads, equal rows written at one width share an id, every id is
    below the columns' capacity, and the ids of states no row is in are let go."""
    cols = NodeColumns(capacity=4, width=8)  # as wide as any node drawn: rows never widen
    for k, view in enumerate(pool):  # every node and variant held by a row of its own
        cols.write(msgspec.structs.replace(view, name=f"p{k}"), 1.0, True, stamp=1)
    names = [f"p{k}" for k in range(len(pool))] + [f"n{i}" for i in range(12)]
    for k, (name, at) in enumerate(ops):  # any row, those first written included
        if at is None:
            cols.drop(names[name])
        else:
            written = msgspec.structs.replace(pool[at], name=names[name])
            cols.write(written, 1.0, True, stamp=k + 2)
    rows = [int(r) for r in cols.rows(names) if r >= 0]
    batch = cols.whole(Limits())
    assert batch.state is not None
    by_id: dict[int, tuple] = {}
    for r in rows:
        values = tuple(str(getattr(batch, f)[..., r].tolist()) for f in ROW_FIELDS)
        assert by_id.setdefault(int(batch.state[r]), values) == values
    assert min(by_id, default=0) >= 0 and max(by_id, default=0) < len(batch)
    assert len(cols._states) == len(by_id)  # nothing held for states no row is in
    assert len(set(by_id.values())) == len(by_id)  # equal rows: one id
