"""``headroom top``: per node and GPU, measured used / granted / headroom / report age /
price, read from a running extender's ``GET /v1/nodes`` -- ``nvidia-smi`` for the whole
cluster. ``--watch`` redraws every few seconds until interrupted."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from extender.core.httpclient import make_client
from extender.core.table import align

HEAD = [
    "NODE",
    "GPU",
    "MODEL",
    "TOTAL",
    "USED",
    "GRANTED",
    "COMMITTED",
    "HEADROOM",
    "AGE",
    "$/GPU-H",
]


class TopError(Exception):
    """The extender could not be asked, or refused: one line saying what to fix."""


def add_top_command(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser(
        "top", help="per node and GPU: used, granted, headroom, report age, price (live)"
    )
    p.add_argument(
        "--url", default="http://127.0.0.1:8888", help="the extender (default %(default)s)"
    )
    p.add_argument("--token-file", help="the audit API's bearer token, when it needs one")
    p.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=2.0,
        metavar="SECONDS",
        help="redraw every SECONDS (2 when given alone) until Ctrl-C",
    )
    p.set_defaults(func=run_top)


def run_top(args: argparse.Namespace) -> int:
    if args.watch is not None and args.watch <= 0:
        raise ValueError(f"--watch must be a positive number of seconds, not {args.watch}")
    token = Path(args.token_file).read_text().strip() if args.token_file else None
    with make_client(args.url, token, timeout=10) as client:
        while True:
            try:
                screen = render(fetch(client, args.url))
            except TopError as e:
                print(f"headroom top: {e}", file=sys.stderr)
                return 1
            if args.watch is None:
                print(screen)
                return 0
            print("\033[H\033[2J" + time.strftime("%H:%M:%S ") + args.url + "\n" + screen)
            time.sleep(args.watch)


def fetch(client: httpx.Client, url: str) -> list[dict[str, Any]]:
    try:
        r = client.get("/v1/nodes")
    except httpx.HTTPError as e:
        raise TopError(f"cannot reach the extender at {url}: {e or type(e).__name__}") from None
    if r.status_code == 401:
        raise TopError(f"{url} needs the audit API's token: pass --token-file")
    if r.status_code != 200:
        raise TopError(f"{url}/v1/nodes answered {r.status_code}: {r.text[:200]}")
    items: list[dict[str, Any]] = r.json()["items"]
    return items


def render(nodes: list[dict[str, Any]]) -> str:
    """One line per GPU (MiB), the node named on its first; a total per node."""
    if not nodes:
        return "no node has reported yet (are the agents running and pointed here?)"
    rows = [HEAD]
    for n in nodes:
        price = n["price_per_gpu_hour"] or "unpriced"
        for i, g in enumerate(n["gpus"]):
            first = i == 0
            rows.append(
                [
                    n["name"] if first else "",
                    str(g["index"]) + (f" {g['mig_profile']}" if g["mig_profile"] else ""),
                    g["model"],
                    str(g["total_mib"]),
                    str(g["used_mib"]),
                    str(g["granted_mib"]),
                    str(g["committed_mib"]),
                    str(g["headroom_mib"]),
                    f"{n['report_age_s']:.0f}s" if first else "",
                    price if first else "",
                ]
            )
    total = sum(n["headroom_mib"] for n in nodes)
    gpus = sum(len(n["gpus"]) for n in nodes)
    footer = f"{len(nodes)} node(s), {gpus} GPU(s), {total} MiB headroom in all (sizes in MiB)"
    return align(rows, right_from=3, rule=True) + "\n" + footer
