"""The compiled scoring kernel (``extender/scoring/kernel.c``) at its edges.

What it computes is checked bit for bit against the plain-Python oracle by the property
tests (test_batch_scoring, test_policies_extra, test_scoring); here: that it takes every
node the wire accepts, that the inventory's wide, grown columns read the same as a fresh
batch, and that arguments it cannot read are refused with an error that names them, never
read out of bounds (a crash would take the scheduler's extender down with it)."""

from __future__ import annotations

import dataclasses
import struct

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.scoring import kernel
from extender.scoring.batch import ROW_FIELDS, GpuBatch
from extender.scoring.fit import fitting_gpus
from extender.scoring.fragmentation import _scores, fragmentation_of, greedy_scores
from extender.scoring.framework import blend_best
from extender.scoring.model import CapacityPref, GpuDemand, GpuView, Limits, NodeView, Shape
from extender.wire.report import MAX_GPUS
from tests import blend_reference
from tests import fragmentation_reference as ref

LIM = Limits()
MIX = ((Shape(1, 4096), 0.5), (Shape(2, None), 0.3), (Shape(1, 12_000, "", 8000, 0), 0.2))


def node(name: str, used: list[int], total: int = 24_576) -> NodeView:
    gpus = tuple(GpuView(f"{name}-{i}", i, "A10G", total, u, 0, "") for i, u in enumerate(used))
    return NodeView(name, gpus, "spot", "g5.12xlarge", 0.01, version=1)


def test_the_widest_node_the_wire_accepts_is_scored() -> None:
    """An agent may report up to MAX_GPUS GPUs; the kernel takes that many slots, and the
    score is the oracle's."""
    wide = node("wide", [0, 9000] * (MAX_GPUS // 2))
    b = GpuBatch.from_views([wide], LIM)
    demand = GpuDemand(count=3, memory_mib=4096)
    fits, raw = greedy_scores(b, None, demand, LIM, MIX, tie_by_free=False, tie=0.0)
    ctx = ref.Context(limits=LIM, mix=MIX)
    fitting = fitting_gpus(wide, demand, LIM)
    assert fits.tolist() == [True]
    assert raw.tolist() == [ref.raw("fgd", wide, demand, fitting, ctx)[1]]
    state = ref.node_state(wide, LIM)[0]
    want = ref.fragmentation(state, MIX, ref.host_of(wide))
    assert fragmentation_of(b, LIM, MIX).tolist() == [want]


def test_rows_read_in_place_equal_a_batch_of_those_rows() -> None:
    """The filter reads rows of the inventory's columns in place (wider and longer than
    the nodes asked about, unordered, with -1 for unknown nodes)."""
    used = [[(i * 3000) % 20_000, 0, 20_000, i * 100][: 1 + i % 4] for i in range(9)]
    views = [node(f"n{i}", u) for i, u in enumerate(used)]
    b = GpuBatch.from_views(views, LIM)
    rows = np.array([7, -1, 2, 2, 0, 8], dtype=np.int64)
    demand = GpuDemand(count=1, memory_mib=2048, cpu_milli=100)
    got = greedy_scores(b, rows, demand, LIM, MIX, tie_by_free=True, tie=0.3, stranding=1.0)
    want = greedy_scores(b.take(rows[rows >= 0]), None, demand, LIM, MIX, True, 0.3, 1.0)
    assert want[0].all() and got[0].tolist() == [True, False, True, True, True, True]
    assert got[1][rows >= 0].tolist() == want[1].tolist()
    assert got[1][1] == 0.0  # an unknown node: no fit, no score


def _args(b: GpuBatch, rows: np.ndarray) -> tuple:
    shares = np.array([1.0])
    mix = (1, 1, np.array([1]), np.array([4096.0]), np.array([0]), np.array([0]), shares)
    pod = (0, np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0, 0.0)
    out = (np.empty(len(rows), bool), np.empty(len(rows)), np.empty((1, len(rows)), np.int64))
    g, n = b.size()
    return (g, n, b.kernel_args(), rows, b.state, (1, 4096, 0, 0, 0), (512, 1024), mix, pod,
            (True, 0.0, 0.0, None), out)  # fmt: skip


def test_arguments_it_cannot_read_are_refused_by_name() -> None:
    b = GpuBatch.from_views([node("a", [0, 0]), node("b", [0])], LIM)
    rows = np.array([0, 1], dtype=np.int64)
    kernel.scores(*_args(b, rows))  # well-formed: no error

    args = list(_args(b, rows))
    args[3] = rows.astype(np.int32)  # 4-byte rows
    with pytest.raises(ValueError, match="rows"):
        kernel.scores(*args)

    args = list(_args(b, rows))
    args[2] = (*args[2][:3], np.ones(3, bool), *args[2][4:])  # present: wrong length
    with pytest.raises(ValueError, match="present"):
        kernel.scores(*args)

    args = list(_args(b, rows))
    args[7] = (*args[7][:1], 5, *args[7][2:])  # weights for 5 rows of 2
    with pytest.raises(ValueError, match="weight columns"):
        kernel.scores(*args)

    args = list(_args(b, rows))
    args[10] = (args[10][0], np.empty(2)[::2], args[10][2])  # a strided output
    with pytest.raises(ValueError, match="raw"):
        kernel.scores(*args)

    args = list(_args(b, rows))
    args[4] = np.zeros(1, np.int64)  # states for 1 node of 2
    with pytest.raises(ValueError, match="states"):
        kernel.scores(*args)

    args = list(_args(b, rows))
    args[0] = MAX_GPUS + 1
    with pytest.raises(ValueError, match="slots"):
        kernel.scores(*args)


def test_a_row_past_the_columns_is_an_error_not_a_read() -> None:
    b = GpuBatch.from_views([node("a", [0])], LIM)
    with pytest.raises(IndexError, match="rows: 1"):
        kernel.scores(*_args(b, np.array([1], dtype=np.int64)))
    out = np.empty(1)
    mix = _args(b, np.zeros(1, np.int64))[7]
    with pytest.raises(IndexError, match="rows: -1"):
        kernel.value(*b.size(), b.kernel_args(), np.array([-1]), (0, 0), (512, 1024), mix, out)


# one input of the pass per edit: (column, slot or None for a node column, new value)
EDITS = [
    None,  # the base state itself
    ("spot", None, True),
    ("cpu_free", None, 500),
    ("mem_free", None, 1024),
    ("cpu_alloc", None, 0),  # allocatable unknown, the same free CPU
    ("mem_alloc", None, 0),
    ("present", 2, False),
    ("reserved", 0, 1),
    ("total", 0, 40_960),
    ("committed", 1, 9001),
    ("node_total", None, 40_000),
    ("node_committed", None, 20_000),
]


def test_nodes_in_the_same_state_get_the_answer_each_would_get_alone() -> None:
    """The pass copies the answer of an earlier node in the same state (a fleet holds many:
    every empty node, every full one), by the rows' state ids. Every answer must be the
    one the node gets when it is scored by itself: nodes that differ from another in one
    input only, and repeats that come after hundreds of other states."""
    k = len(EDITS)
    # two bases: host CPU the scarce resource on one, host memory on the other, so that
    # each allocatable figure changes some answer (stranding reads the scarcer)
    bases = [_base(12_000, 8192), _base(4000, 62_000)]
    unique = [node(f"u{i}", [i * 7 % 20_000, (i * 13) % 24_000, 100 + i]) for i in range(600)]
    edited = [b for b in bases for _ in range(k)]
    b = GpuBatch.from_views(edited + unique + edited, LIM)
    for i in range(len(edited)):
        if (edit := EDITS[i % k]) is not None:
            column, slot, value = edit
            for at in (i, len(b) - len(edited) + i):  # the first copy, the one after 600 others
                getattr(b, column)[(at,) if slot is None else (slot, at)] = value
    states = _states_of(b)  # of the edited rows
    b = dataclasses.replace(b, state=states)
    assert len(set(states.tolist())) == 600 + 2 * k
    rows = np.array([*range(len(b)), -1, 3, 0, *range(len(edited))], dtype=np.int64)
    mix = (*MIX, (Shape(1, 2048, "", 2000, 16_384), 0.1))
    changed = [False] * k
    for capacity in (CapacityPref.ANY, CapacityPref.ON_DEMAND):
        demand = GpuDemand(2, 2048, cpu_milli=600, host_memory_mib=2048, capacity=capacity)

        def scored(at: np.ndarray, d: GpuDemand = demand) -> tuple:
            return _scores(b, at, d, LIM, mix, True, 0.3, 1.0, None)

        fits, raw, picks = scored(rows)
        alone = [scored(rows[i : i + 1]) for i in range(len(rows))]
        assert fits.tolist() == [bool(a[0][0]) for a in alone]
        assert raw.tolist() == [float(a[1][0]) for a in alone]  # bit for bit
        assert picks.T.tolist() == [a[2][:, 0].tolist() for a in alone]
        answer = [(bool(fits[i]), float(raw[i]), *picks[:, i].tolist()) for i in range(len(b))]
        for i in range(len(edited)):
            changed[i % k] |= answer[i] != answer[i - i % k]
    # every edit changed some answer: a lookup that ignored that input would have copied
    # its base's answer and failed the comparisons above
    missed = [e for e, c in zip(EDITS, changed, strict=True) if not c]
    assert missed == [None], missed  # None: the base itself


def _states_of(b: GpuBatch) -> np.ndarray:
    """Each row's state id, read from the batch's arrays: equal ids for rows equal in
    every column."""
    ids: dict[tuple, int] = {}
    keys = (tuple(str(getattr(b, f)[..., n].tolist()) for f in ROW_FIELDS) for n in range(len(b)))
    return np.array([ids.setdefault(key, len(ids)) for key in keys], dtype=np.int64)


def _base(cpu_requested: int, memory_requested: int) -> NodeView:
    return msgspec.structs.replace(
        node("base", [0, 9000, 20_000, 0]),
        capacity_type="on-demand",
        cpu_allocatable_milli=16_000,
        cpu_requested_milli=cpu_requested,
        memory_allocatable_mib=65_536,
        memory_requested_mib=memory_requested,
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([-3.5, -0.25, 0.0, 0.1, 0.1, 2.0, 7.75]),  # repeats: ties
            st.booleans(),
            st.sampled_from([np.nan, 0.004, 0.004, 0.011, 0.02]),
        ),
        max_size=40,
    ),
    st.sampled_from([(1.0, 1.0), (1.0, 0.0), (0.0, 1.0), (2.0, 0.5)]),
)
def test_the_compiled_blend_is_the_numpy_blend_bit_for_bit(nodes, weights) -> None:
    """Tied scores, prices unknown (NaN) or all equal, no node fitting, one weight 0:
    the kernel's blend is NumPy's, and its best node is nanargmax's (the first of equals)."""
    raw = np.array([r for r, _, _ in nodes], dtype=float)
    fits = np.array([f for _, f, _ in nodes], dtype=bool)
    prices = np.array([p for _, _, p in nodes], dtype=float)
    b, best = blend_best(raw, fits, prices, *weights)
    want = blend_reference.blend(raw, fits, prices, *weights)
    assert b.tobytes() == want.tobytes()
    assert best == blend_reference.best(want)


# a NaN whose bits NumPy's own NaN does not have: a price column's bits go through as they are
SIGNALLING_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF4000000000001))[0]


def numpy_read(received, price, rows, now, stale_after):
    """NodeColumns.read as it was written in NumPy before ``kernel.fresh``: the reference."""
    if not len(received):
        return rows.copy(), np.full(len(rows), np.nan), np.full(len(rows), np.nan)
    received_of = received.take(rows)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, not fresh
        dead = ~((now - received_of <= stale_after) & (rows >= 0))
    live = rows.copy()
    live[dead] = -1
    price_of = price.take(rows)
    price_of[dead] = np.nan
    received_of[dead] = np.nan
    return live, price_of, received_of


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([np.nan, 0.0, -0.0, 70.0, 90.0, 100.0, 100.5, np.inf, -np.inf]),
            st.sampled_from([np.nan, -np.nan, SIGNALLING_NAN, 0.0, -0.0, 0.004, 0.011]),
        ),
        max_size=30,
    ),
    st.data(),
    st.sampled_from([(100.0, 10.0), (100.0, 30.0), (100.0, 0.0), (np.inf, 5.0), (100.0, np.nan)]),
)
def test_fresh_is_the_numpy_read_bit_for_bit(columns, data, clock) -> None:
    """Reports just at the staleness boundary (``now - received == stale_after`` is
    fresh), from the future, never made (NaN), infinite, at -0.0; prices of any NaN bits
    or -0.0; candidates without a row (-1), repeated, or none at all; columns no node has
    reported into yet; a NaN staleness window (nothing is fresh)."""
    received = np.array([r for r, _ in columns], dtype=float)
    price = np.array([p for _, p in columns], dtype=float)
    rows = np.array(
        data.draw(st.lists(st.integers(-1, len(columns) - 1), max_size=40)), dtype=np.int64
    )
    out = (np.empty(len(rows), np.int64), np.empty(len(rows)), np.empty(len(rows)))
    now, stale_after = clock
    kernel.fresh(received, price, rows, now, stale_after, out)
    for got, want in zip(out, numpy_read(received, price, rows, now, stale_after), strict=True):
        assert got.tobytes() == want.tobytes()


def test_fresh_refuses_a_row_past_the_columns() -> None:
    out = (np.empty(1, np.int64), np.empty(1), np.empty(1))
    with pytest.raises(IndexError, match="rows: 2"):
        kernel.fresh(np.zeros(2), np.zeros(2), np.array([2]), 1.0, 1.0, out)
    with pytest.raises(ValueError, match="live"):
        kernel.fresh(np.zeros(2), np.zeros(2), np.array([0, 1]), 1.0, 1.0, out)
