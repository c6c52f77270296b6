"""Start-up compiles nothing and needs no cache directory: the server's modules import
without numba, and the vectorised helpers that replaced its kernels answer as the
per-entry loops they replaced (kept here as the reference)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.codec.nodebytes import value_end
from extender.scheduling import plans


def test_the_server_imports_no_compiler() -> None:
    code = "import sys, extender.wiring; print(sorted({'numba', 'llvmlite'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def merge_reference(fits, raw, price, redo, new_fits, new_raw, new_price, new_received):
    differs, earliest, failing, down = False, np.inf, [], []
    for k, i in enumerate(redo.tolist()):
        same_price = price[i] == new_price[k] or (np.isnan(price[i]) and np.isnan(new_price[k]))
        differs |= bool(fits[i] != new_fits[k] or raw[i] != new_raw[k] or not same_price)
        if not fits[i] or not new_fits[k]:
            failing.append(k)
        fits[i], raw[i], price[i] = new_fits[k], new_raw[k], new_price[k]
        if np.isnan(new_received[k]):
            down.append(i)
        elif new_received[k] < earliest:
            earliest = new_received[k]
    return differs, earliest, failing, down


@settings(max_examples=200, deadline=None)
@given(data=st.data(), n=st.integers(1, 12))
def test_merge_is_the_loop_it_replaced(data: st.DataObject, n: int) -> None:
    floats = st.one_of(st.just(np.nan), st.sampled_from([0.0, 1.0, 2.5]))
    arrays = [
        np.array(data.draw(st.lists(kind, min_size=n, max_size=n)), dtype)
        for kind, dtype in ((st.booleans(), bool), (floats, float), (floats, float))
    ]
    redo = np.array(sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1))), np.int64)
    m = len(redo)
    new = [
        np.array(data.draw(st.lists(kind, min_size=m, max_size=m)), dtype)
        for kind, dtype in (
            (st.booleans(), bool),
            (floats, float),
            (floats, float),
            (floats, float),
        )
    ]
    copies = [a.copy() for a in arrays]
    fits, raw, price = arrays
    old_fits, old_raw, old_price = copies
    new_fits, new_raw, new_price, new_received = new
    want = merge_reference(
        old_fits, old_raw, old_price, redo, new_fits, new_raw, new_price, new_received
    )
    got = plans._merge(fits, raw, price, redo, new_fits, new_raw, new_price, new_received)
    assert (got[0], got[1], got[2].tolist(), got[3].tolist()) == want
    for a, b in zip(arrays, copies, strict=True):
        np.testing.assert_array_equal(a, b)


def value_end_reference(buf: bytes, p: int) -> int:
    if p >= len(buf) or buf[p] not in b"{[":
        return -1
    depth, in_string = 0, False
    while p < len(buf):
        c = buf[p]
        if in_string:
            if c == ord("\\"):
                p += 1
            elif c == ord('"'):
                in_string = False
        elif c == ord('"'):
            in_string = True
        elif c in b"{[":
            depth += 1
        elif c in b"}]":
            depth -= 1
            if depth == 0:
                return p + 1
        p += 1
    return -1


JSON = st.recursive(
    st.none() | st.integers() | st.text(alphabet='ab"\\{}[],: '),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=JSON, tail=st.binary(max_size=8), cut=st.integers(0, 64))
def test_value_end_is_the_scan_it_replaced(value: object, tail: bytes, cut: int) -> None:
    import msgspec

    body = b"x" + msgspec.json.encode(value) + tail
    for data in (body, body[: max(1, len(body) - cut)]):
        buf = np.frombuffer(data, np.uint8)
        assert value_end(buf, 1) == value_end_reference(data, 1)
