"""The compiled scoring kernel (``extender/scoring/kernel.c``) at its edges.

What it computes is checked bit for bit against the plain-Python oracle by the property
tests (test_batch_scoring, test_policies_extra, test_scoring); here: that it takes every
node the wire accepts, that the inventory's wide, grown columns read the same as a fresh
batch, and that arguments it cannot read are refused with an error that names them, never
read out of bounds (a crash would take the scheduler's extender down with it)."""

from __future__ import annotations

import numpy as np
import pytest

from extender.scoring import kernel
from extender.scoring.batch import GpuBatch
from extender.scoring.fit import fitting_gpus
from extender.scoring.fragmentation import fragmentation_of, greedy_scores
from extender.scoring.model import GpuDemand, GpuView, Limits, NodeView, Shape
from extender.wire.report import MAX_GPUS
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
    return (g, n, b.kernel_args(), rows, (1, 4096, 0, 0, 0), (512, 1024), mix, pod,
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
    args[6] = (*args[6][:1], 5, *args[6][2:])  # weights for 5 rows of 2
    with pytest.raises(ValueError, match="weight columns"):
        kernel.scores(*args)

    args = list(_args(b, rows))
    args[9] = (args[9][0], np.empty(2)[::2], args[9][2])  # a strided output
    with pytest.raises(ValueError, match="raw"):
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
    mix = _args(b, np.zeros(1, np.int64))[6]
    with pytest.raises(IndexError, match="rows: -1"):
        kernel.value(*b.size(), b.kernel_args(), np.array([-1]), (0, 0), (512, 1024), mix, out)
