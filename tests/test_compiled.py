"""The compiled kernels' plumbing: a read-only install still compiles (no disk cache),
and ``warm_up`` leaves nothing to compile for the first request."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from extender import columns, plans
from extender.scoring import batch, compiled, fragmentation, narrowing


def test_without_a_writable_cache_it_compiles_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    real = numba.njit

    def no_locator(*args: object, **options: object) -> object:
        if options.get("cache"):  # what numba raises when no cache directory is writable
            raise RuntimeError("cannot cache function 'f': no locator available")
        return real(*args, **options)

    monkeypatch.setattr(compiled, "njit", no_locator)

    def twice(x):  # type: ignore[no-untyped-def]
        return 2 * x

    f = compiled.kernel(twice)
    assert f(np.int64(21)) == 42
    assert f.signatures  # compiled by numba, not the Python function


def test_after_warm_up_requests_compile_nothing_more() -> None:
    """A request must not be the one that pays a compile (~1 s): the warm-up call uses
    the argument types the scoring path passes, whatever the demand or subset."""
    from extender.columns import NodeColumns
    from extender.demand import CapacityPref, GpuDemand
    from extender.scoring import Context, Limits, framework, policy_by_name
    from extender.scoring.batch import GpuBatch
    from extender.scoring.framework import (
        Weights,
        blend_kernel,
        blended_array,
        evaluate_batch,
        evaluate_rows,
        priority_array,
    )
    from extender.scoring.model import GpuView, NodeView

    compiled.warm_up()
    kernels = [
        fragmentation._greedy,
        fragmentation._greedy_one,
        blend_kernel,
        batch._chosen_fill,
        batch._node_fill,
        columns._read,
        columns._changed,
        narrowing._passing,
        plans._merge,
        plans._take_by_ids,
        batch.unfit,
        framework._priorities,
        plans._received,
    ]
    before = [len(k.signatures) for k in kernels]
    lim = Limits()
    nodes = [
        NodeView(
            f"n{i}",
            tuple(GpuView(f"g{i}{j}", j, "A10G", 24_576, 1000 * i * j) for j in range(4)),
            "spot",
            "g5.12xlarge",
            0.01,
        )
        for i in range(5)
    ]
    cols = NodeColumns()
    for view in nodes:
        cols.write(view, 10.0, True, stamp=1)
    cols.changed(cols.rows([v.name for v in nodes]), cols.layout, 0)
    live, price, received = cols.read(cols.rows([v.name for v in nodes]), 20.0, 30.0)
    rows = GpuBatch.from_views(nodes, lim)
    for demand in (
        GpuDemand(1, 4096),
        GpuDemand(2, None),
        GpuDemand(3, 20_000),
        GpuDemand(1, 4096, CapacityPref.ON_DEMAND),
    ):
        for policy in ("headroom", "fgd", "binpack", "spread"):
            fits, raw = evaluate_batch(rows, demand, policy_by_name(policy), Context(lim))
            blended_array(raw, fits, np.full(len(raw), 0.01), Weights(2, 1))
            fits, raw = evaluate_rows(
                cols.whole(lim), live, demand, policy_by_name(policy), Context(lim)
            )
            narrowing.passing(raw, fits, price, Weights(2, 1), 0.05)
            redo = np.arange(2, dtype=np.int64)
            plans._merge(fits, raw, price, redo, fits[:2], raw[:2], price[:2], received[:2])
            batch.unfit(fits)
            plans._received(received)
            plans._take_by_ids(np.arange(5), redo, fits, raw, price, live, redo[:1])
            priority_array(raw, fits, price, Weights(2, 1))
    assert [len(k.signatures) for k in kernels] == before
