"""The compiled kernels' plumbing: a read-only install still compiles (no disk cache),
and ``warm_up`` leaves nothing to compile for the first request."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from extender.scoring import batch, compiled, fragmentation


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
    from extender.demand import GpuDemand
    from extender.scoring import Context, Limits, policy_by_name
    from extender.scoring.batch import GpuBatch
    from extender.scoring.framework import Weights, _blend, blended_array, evaluate_batch
    from extender.scoring.model import GpuView, NodeView

    compiled.warm_up()
    kernels = [fragmentation._greedy, _blend, batch._chosen_fill, batch._node_fill]
    before = [len(k.signatures) for k in kernels]
    lim = Limits()
    nodes = [NodeView(f"n{i}", tuple(GpuView(f"g{i}{j}", j, "A10G", 24_576, 1000 * i * j)
                                     for j in range(4)), "spot") for i in range(5)]
    rows = GpuBatch.from_views(nodes, lim)
    for demand in (GpuDemand(1, 4096), GpuDemand(2, None), GpuDemand(3, 20_000)):
        for policy in ("headroom", "fgd", "binpack", "spread"):
            fits, raw = evaluate_batch(rows, demand, policy_by_name(policy), Context(lim))
            blended_array(raw, fits, np.full(len(raw), 0.01), Weights(2, 1))
    assert [len(k.signatures) for k in kernels] == before
