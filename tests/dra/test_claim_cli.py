"""``headroom claim`` as a process: YAML on stdout, exit 2 with one line on bad input.

Most cases run ``python -m extender.cli`` (the same ``add_claim_command`` that
``extender.cli`` registers) so they do not depend on the other sub-commands' imports;
the last one runs the real ``extender.cli`` entry point.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import yaml

from extender.dra.cli import add_claim_command

ROOT = Path(__file__).resolve().parents[2]


def _claim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extender.cli", "claim", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_prints_a_valid_template() -> None:
    done = _claim("--memory", "20Gi", "--model", "H100|H200", "--namespace", "ml")
    assert done.returncode == 0, done.stderr
    docs = list(yaml.safe_load_all(done.stdout))
    assert len(docs) == 1
    (doc,) = docs
    assert doc["metadata"]["name"] == "gpu-20gi"
    assert doc["metadata"]["namespace"] == "ml"
    exactly = doc["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["selectors"][1]["cel"]["expression"] == (
        "device.attributes['gpu.nvidia.com'].productName.matches('H100|H200')"
    )
    kubernetes_validate.validate(doc, "1.37", strict=True)


def test_device_class_is_a_second_document() -> None:
    done = _claim("--memory", "40Gi", "--count", "2", "--class", "mig.nvidia.com", "--device-class")
    assert done.returncode == 0, done.stderr
    template, device_class = yaml.safe_load_all(done.stdout)
    assert template["kind"] == "ResourceClaimTemplate"
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    assert device_class["kind"] == "DeviceClass"
    assert device_class["metadata"]["name"] == "mig.nvidia.com"
    kubernetes_validate.validate(device_class, "1.37", strict=True)


def test_bad_input_exits_2_with_one_line() -> None:
    for args, needle in [
        (["--memory", "0Gi"], "--memory must be positive"),
        (["--memory", "20Gi", "--count", "40"], "--count must be an integer from 1 to 32"),
        (["--memory", "20Gi", "--model", "(?=x)"], "--model is not a valid RE2 regex"),
    ]:
        done = _claim(*args)
        assert done.returncode == 2, (args, done.stdout)
        assert done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert lines == [lines[0]] and lines[0].startswith("headroom claim: ")
        assert needle in lines[0]


def test_registers_on_a_headroom_style_parser() -> None:
    parser = argparse.ArgumentParser(prog="headroom")
    add_claim_command(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(["claim", "--memory", "20Gi", "--device-class"])
    assert (args.cmd, args.memory, args.count, args.class_name, args.device_class) == (
        "claim",
        "20Gi",
        1,
        "gpu.nvidia.com",
        True,
    )
    assert args.func.__name__ == "run_claim"


def test_headroom_cli_registers_claim() -> None:
    """The real entry point (``headroom claim`` = ``python -m extender.cli claim``)."""
    done = subprocess.run(
        [sys.executable, "-m", "extender.cli", "claim", "--memory", "20Gi"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (doc,) = yaml.safe_load_all(done.stdout)
    assert (doc["kind"], doc["metadata"]["name"]) == ("ResourceClaimTemplate", "gpu-20gi")


def test_shared_asks_for_memory_of_one_shareable_gpu() -> None:
    done = _claim("--memory", "20Gi", "--shared", "--model", "A10G|L4")
    assert done.returncode == 0, done.stderr
    (doc,) = yaml.safe_load_all(done.stdout)
    assert doc["metadata"]["name"] == "gpu-20gi-shared"
    exactly = doc["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["capacity"] == {"requests": {"memory": "20Gi"}}
    assert exactly["count"] == 1
    assert [s["cel"]["expression"] for s in exactly["selectors"]] == [
        "device.allowMultipleAllocations",
        "device.attributes['gpu.nvidia.com'].productName.matches('A10G|L4')",
    ]
    kubernetes_validate.validate(doc, "1.37", strict=True)
    refused = _claim("--memory", "20Gi", "--shared", "--count", "2")
    assert refused.returncode == 2
    assert "--shared asks for memory of one device: --count must be 1" in refused.stderr
