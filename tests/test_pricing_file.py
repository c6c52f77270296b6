"""Price files that cannot be used: one clear line each, through the CLI exit code 2 with
no traceback (issue 27)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from extender.pricing import PriceFileError, load_pricebook

# (file name, content, the message after "<path>: ")
BAD = [
    (
        "comma.yaml",
        'instance_types:\n  g5.xlarge: {on_demand: "1,2"}\n',
        "price entry 'g5.xlarge': on_demand \"1,2\" is not a decimal number",
    ),
    (
        "comma-bare.yaml",
        "instance_types:\n  g5.xlarge:\n    on_demand: 1,2\n",
        "price entry 'g5.xlarge': on_demand \"1,2\" is not a decimal number",
    ),
    (
        "negative.json",
        '{"instance_types": {"g5.xlarge": {"on_demand": "-1.006"}}}',
        "price entry 'g5.xlarge': on_demand \"-1.006\" is negative",
    ),
    (
        "nan.yaml",
        "instance_types:\n  g5.xlarge: {spot: .nan}\n",
        "price entry 'g5.xlarge': spot \"nan\" is not a finite number",
    ),
    (
        "inf.json",
        '{"instance_types": {"g5.xlarge": {"on_demand": "Infinity"}}}',
        "price entry 'g5.xlarge': on_demand \"Infinity\" is not a finite number",
    ),
    (
        "nan-literal.json",
        '{"gpu_models": {"NVIDIA A10G": NaN}}',
        "gpu model 'NVIDIA A10G': on_demand \"nan\" is not a finite number",
    ),
    (
        "bool.yaml",
        "gpu_models:\n  NVIDIA L4: yes\n",
        "gpu model 'NVIDIA L4': on_demand \"True\" is not a decimal number",
    ),
    (
        "unknown-entry-key.yaml",
        'instance_types:\n  g5.xlarge: {ondemand: "1.0"}\n',
        "price entry 'g5.xlarge': unknown key 'ondemand' (expected one of on_demand, spot,"
        " gpus, gpu_model, gpu_memory_mib)",
    ),
    (
        "unknown-top-keys.yaml",
        "instance_type: {}\nspot_discount: 0.5\n",
        "unknown keys 'instance_type', 'spot_discount' (expected one of instance_types,"
        " gpu_models, region, source)",
    ),
    (
        "unknown-model-key.yaml",
        'gpu_models:\n  NVIDIA L4: {price: "0.7"}\n',
        "gpu model 'NVIDIA L4': unknown key 'price' (expected one of on_demand, spot)",
    ),
    (
        "gpus.yaml",
        'instance_types:\n  x.large: {on_demand: "1", gpus: two}\n',
        "price entry 'x.large': gpus \"two\" is not a whole number >= 0",
    ),
    (
        "new-type.yaml",
        "instance_types:\n  x.large: {gpus: 1}\n",
        "price entry 'x.large': on_demand is missing (a type not in the bundled table needs"
        " on_demand, gpus, gpu_memory_mib)",
    ),
    (
        "empty.yaml",
        "",
        "expected a mapping with 'instance_types' or 'gpu_models'",
    ),
    (
        "neither.json",
        '{"region": "us-east-1"}',
        "expected 'instance_types' or 'gpu_models' (or both)",
    ),
    (
        "list.yaml",
        "instance_types: [g5.xlarge]\n",
        "'instance_types' must be a mapping, not list",
    ),
    (
        "malformed.yaml",
        'instance_types:\n  g5.xlarge: {on_demand: "1.0"\n  g5.2xlarge: {}\n',
        "malformed YAML: line 3, column 3: expected ',' or '}', but got '<scalar>'",
    ),
    (
        "tab.yaml",
        "instance_types:\n\tg5.xlarge: {}\n",
        "malformed YAML: line 2, column 1: found character '\\t' that cannot start any token",
    ),
    (
        "malformed.json",
        '{"instance_types": {"g5.xlarge": {"on_demand": "1.0",}}}',
        "malformed JSON: line 1, column 54: Expecting property name enclosed in double quotes",
    ),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_file_message(tmp_path: Path, name: str, text: str, message: str) -> None:
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(PriceFileError) as e:
        load_pricebook(str(f))
    assert str(e.value) == f"{f}: {message}"
    assert "\n" not in str(e.value)


def test_missing_file(tmp_path: Path) -> None:
    f = tmp_path / "nope.yaml"
    with pytest.raises(PriceFileError, match=r"price file .*nope\.yaml: cannot read it"):
        load_pricebook(str(f))


def test_zero_is_a_price_when_written(tmp_path: Path) -> None:
    # an explicit 0 (a free on-prem pool) is the file's word, not a silent default
    f = tmp_path / "free.yaml"
    f.write_text('gpu_models:\n  NVIDIA T4: "0"\n')
    p = load_pricebook(str(f)).node_price("onprem", "", 1, 15360, gpu_model="Tesla T4")
    assert p is not None and p.per_hour == 0 and p.source == "gpu-model"


def test_yaml_numbers_stay_exact(tmp_path: Path) -> None:
    f = tmp_path / "n.yaml"
    f.write_text("instance_types:\n  g5.xlarge: {on_demand: 1.006, spot: 3}\n")
    e = load_pricebook(str(f)).instance("g5.xlarge")
    assert e is not None and (str(e.on_demand), str(e.spot)) == ("1.006", "3")


@pytest.mark.parametrize(("name", "text"), [(b[0], b[1]) for b in BAD[:1] + BAD[-3:]])
def test_cli_prints_one_line_and_exits_2(tmp_path: Path, name: str, text: str) -> None:
    f = tmp_path / name
    f.write_text(text)
    r = subprocess.run(
        [sys.executable, "-m", "extender.cli", "serve", "--price-file", str(f)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"headroom serve: {f}: ")
