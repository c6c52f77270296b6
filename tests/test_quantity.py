"""Quantities are read exactly as Kubernetes reads them, and no string is expensive.

The table in tests/fixtures/k8s_quantities.json is Kubernetes' own verdict
(``resource.ParseQuantity`` of k8s.io/apimachinery, run by tests/tools/quantity_oracle)
on 7,000+ strings: the quantities pods write, its own test tables, the attacks of
issue 23, and seeded random strings over the grammar's alphabet and parts.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.core.quantity import (
    MAX_LENGTH,
    MAX_VALUE,
    QuantityError,
    parse_quantity,
    quantity_to_int,
    quantity_to_mib,
)
from extender.state.demand import DemandError, demand_of
from extender.wire.protocol import Pod

TABLE = json.loads(
    (Path(__file__).parent / "fixtures" / "k8s_quantities.json").read_text(encoding="utf-8")
)


def test_the_oracle_table_is_wide() -> None:
    accepted = [v for v in TABLE if v["ok"] and v["value"] != "out-of-range"]
    refused = [v for v in TABLE if not v["ok"]]
    assert len(accepted) > 2000 and len(refused) > 2000


@pytest.mark.parametrize("verdict", TABLE, ids=lambda v: repr(v["in"])[:30])
def test_agrees_with_kubernetes(verdict: dict) -> None:
    text = verdict["in"]
    if len(text) > MAX_LENGTH:
        with pytest.raises(QuantityError, match="longer than"):
            parse_quantity(text)
    elif not verdict["ok"]:
        with pytest.raises(QuantityError):
            parse_quantity(text)
    elif verdict["value"] == "out-of-range":  # Kubernetes caps or keeps it whole; we refuse
        with pytest.raises(QuantityError, match="too large"):
            parse_quantity(text)
    else:
        assert parse_quantity(text) == Decimal(verdict["value"])


@pytest.mark.parametrize(
    "text",
    ["1e999999", "-1e999999", "1e99999999999", "1e2147483647", "9" * 40 + "Ei"],
)
def test_huge_values_are_refused_without_computing_them(text: str) -> None:
    with pytest.raises(QuantityError, match="too large") as err:
        quantity_to_mib(text)
    assert len(str(err.value)) < 120  # the message quotes a bounded prefix


def test_long_strings_are_refused_and_quoted_short() -> None:
    text = "1" + "0" * 100_000
    with pytest.raises(QuantityError, match="longer than 64 characters") as err:
        parse_quantity(text)
    assert len(str(err.value)) < 120


@pytest.mark.parametrize(
    "text",
    [
        "\u0663Gi",
        "\uff12\uff10Gi",
        "1e999999Gi",
        "1_000Gi",
        "",
        "20 Gi",
        "20GiB",
        "NaN",
        "inf",
    ],  # Arabic-Indic and fullwidth digits
)
def test_what_kubernetes_refuses_is_refused(text: str) -> None:
    with pytest.raises(QuantityError, match="not a Kubernetes quantity"):
        parse_quantity(text)


def test_tiny_values_round_up_to_one_nano_unit_as_in_kubernetes() -> None:
    assert parse_quantity("1e-999999") == Decimal("1e-9")
    assert parse_quantity("-1e-10") == Decimal("-1e-9")
    assert quantity_to_mib("1e-999999") == 1  # a request is never shrunk to nothing


@given(st.text(max_size=80))
def test_any_string_is_a_bounded_value_or_a_quantity_error(text: str) -> None:
    try:
        value = parse_quantity(text)
    except QuantityError:
        return
    assert abs(value) < MAX_VALUE
    assert value == value.quantize(Decimal("1e-9"))  # at most nano precision


@given(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from([("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("k", 10**3), ("G", 10**9)]),
)
def test_whole_numbers_with_a_suffix(n: int, suffix: tuple[str, int]) -> None:
    text, factor = f"{n}{suffix[0]}", suffix[1]
    assert parse_quantity(text) == n * factor
    assert quantity_to_mib(text) == -(-n * factor // 2**20)


def test_counts_are_whole() -> None:
    assert quantity_to_int("2") == 2 and quantity_to_int("1e1") == 10
    with pytest.raises(QuantityError, match="not a whole number"):
        quantity_to_int("1.5")


def _pod(annotations: dict[str, str], gpus: str = "1") -> Pod:
    import msgspec

    raw = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }
    return msgspec.convert(raw, Pod)


@pytest.mark.parametrize(
    ("annotations", "gpus", "field"),
    [
        ({"headroom.dev/gpu-memory": "1e999999"}, "1", "headroom.dev/gpu-memory"),
        ({"headroom.dev/gpu-memory": "1e999999Gi"}, "1", "headroom.dev/gpu-memory"),
        ({"headroom.dev/gpu-memory": "\u0663Gi"}, "1", "headroom.dev/gpu-memory"),
        ({"headroom.dev/gpu-memory": "1_000Gi"}, "1", "headroom.dev/gpu-memory"),
        ({}, "1e999999", "nvidia.com/gpu"),
        ({}, "1e19", "nvidia.com/gpu"),
        ({"headroom.dev/capacity-type": "x" * 10_000}, "1", "headroom.dev/capacity-type"),
    ],
)
def test_a_malformed_ask_names_its_field(annotations: dict, gpus: str, field: str) -> None:
    with pytest.raises(DemandError, match=field) as err:
        demand_of(_pod(annotations, gpus))
    assert len(str(err.value)) < 300


def test_annotation_whitespace_is_trimmed_as_kubernetes_trims_json() -> None:
    assert demand_of(_pod({"headroom.dev/gpu-memory": " 20Gi\n"})).memory_mib == 20 * 1024
