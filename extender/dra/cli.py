"""``headroom claim``: print a GPU ResourceClaimTemplate (and DeviceClass) as YAML.

A thin edge over ``extender.dra.template``: argparse in, YAML out, exit 2 with one
line on stderr for bad input (the pure builders raise ValueError naming the input).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from extender.dra.template import DRIVER, MAX_COUNT, claim_template, device_class


def add_claim_command(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register ``claim`` on the ``headroom`` sub-command parser."""
    p = subparsers.add_parser(
        "claim",
        help="print a DRA ResourceClaimTemplate for GPUs with at least this memory "
        "(or, --shared, this memory of one shareable GPU)",
    )
    p.add_argument("--memory", required=True, help="GPU memory each device must have, e.g. 20Gi")
    p.add_argument("--count", type=int, default=1, help=f"devices (1..{MAX_COUNT}, default 1)")
    p.add_argument("--model", help="RE2 regex on the device productName, e.g. 'H100|H200'")
    p.add_argument("--name", help="template name (default gpu-<memory>, e.g. gpu-20gi)")
    p.add_argument(
        "--class", dest="class_name", default=DRIVER, help=f"DeviceClass name (default {DRIVER})"
    )
    p.add_argument("--namespace", help="namespace to put in the template's metadata")
    p.add_argument(
        "--shared",
        action="store_true",
        help="ask for --memory of one shareable GPU (DRA consumable capacity), not a whole GPU",
    )
    p.add_argument(
        "--device-class",
        action="store_true",
        help="also print the DeviceClass as a second YAML document",
    )
    p.set_defaults(func=run_claim)


def run_claim(args: argparse.Namespace) -> int:
    try:
        docs = claim_documents(args)
    except ValueError as e:
        print(f"headroom claim: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True, width=4096))
    return 0


def claim_documents(args: argparse.Namespace) -> list[dict[str, Any]]:
    template = claim_template(
        memory=args.memory,
        count=args.count,
        model=args.model,
        name=args.name,
        class_name=args.class_name,
        namespace=args.namespace,
        shared=args.shared,
    )
    return [template, device_class(args.class_name)] if args.device_class else [template]
