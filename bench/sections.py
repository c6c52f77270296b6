"""Where a filter or prioritize request's time goes inside ``headroom serve``, section by
section, next to the floor's whole request: the diagnosis behind bench/latency.py's
ratios, over the same real HTTP and the same bodies.

    .venv/bin/python bench/sections.py [--nodes 5000] [--pods 300] [--shapes shuffled,warm]

The server is bench/serve_with_floor.py with ``--sections``: the service's and the
decoder's calls below wrapped in timers (~0.3 µs each), and the whole ASGI request timed
per route. Nested sections are inside their parent, so rows do not add up. p50 and p99
in µs over the pods of one shape.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.latency import HttpPairs, measure, report_nodes, start_server  # noqa: E402
from extender.core.httpclient import make_client  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=300)
    ap.add_argument("--shapes", default="shuffled,warm")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(tmp, sections=True)
        try:
            with make_client(url, timeout=120) as client:
                names = [f"node-{i:05d}" for i in range(args.nodes)]
                drivers = report_nodes(client, names)
                print("| shape | request | section | calls | p50 µs | p99 µs |")
                print("|---|---|---|---:|---:|---:|")
                for shape in args.shapes.split(","):
                    client.get("/sections")  # what the reports left: cleared
                    measure(
                        client, HttpPairs(client), drivers, names, "NodeNames", shape, args.pods
                    )
                    for key, (calls, p50, p99) in client.get("/sections").json().items():
                        route, section = key.split(" ", 1)
                        print(
                            f"| {shape} | {route} | {section} | {calls} | {p50:.0f} | {p99:.0f} |"
                        )
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
