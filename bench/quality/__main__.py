"""Compare placement policies on a trace; write the table and plots.

    .venv/bin/python -m bench.quality --seed 1 --out docs/

Every policy runs through kube-scheduler's arithmetic (``scheduler.KUBE``) and, for
reference, the ideal argmax (``scheduler.IDEAL``), ``--repeats`` times (seeds seed,
seed+1, ...: cluster, trace, arrival order and tie-breaks all change). ``--nodes/--pods``
pick an Alibaba ``cluster-trace-gpu-v2023`` node and pod CSV instead of the synthetic ones;
``--openb gpu|all`` runs the openb trace in ``../shared/data/openb`` as its paper does
(docs/scheduling.md, "The openb trace"): every GPU 16,000 MiB (a share of g milli-GPU is
g x 16 MiB), every pod allowed on any capacity type, to 130% of capacity however many pods
fail; ``all`` adds the 310 CPU-only nodes and the trace's CPU-only pods.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from extender.pricing import load_pricebook
from extender.scoring import Context, Limits, NodePolicy, Weights, policy_by_name

from .baselines import DotProduct, RandomFit
from .cluster import SimNode, make_cluster, model_memory, read_alibaba_nodes
from .report import plot_allocation, plot_cost, splice, table
from .run import Result, inflate
from .scheduler import IDEAL, KUBE, Mode
from .trace import TracePod, make_trace, read_alibaba_pods, trace_mix

OPENB = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "openb"
OPENB_NODES = {"gpu": "openb_node_list_gpu_node.csv", "all": "openb_node_list_all_node.csv"}
OPENB_PODS = "openb_pod_list_default.csv"
OPENB_GPU_MIB = 16_000
EXACT = Limits(margin_mib=0, idle_mib=0)  # the evaluator's accounting is exact: no margin


@dataclass(frozen=True)
class Contender:
    label: str
    policy: str
    cost_weight: float  # Weights(policy=1, cost=cost_weight) as ``priorities`` blends them
    narrowing: bool
    decide: bool = False  # with narrowing: the filter passes the best node alone


CONTENDERS: tuple[Contender, ...] = (
    Contender("random", "random", 0.0, False),
    Contender("spread (least allocated)", "spread", 0.0, False),
    Contender("best-fit (binpack)", "binpack", 0.0, False),
    Contender("dot-product", "dot-product", 0.0, False),
    Contender("gpu-packing", "gpu-packing", 0.0, False),
    Contender("fgd", "fgd", 0.0, False),
    Contender("fgd + cost (previous default)", "fgd", 1.0, False),
    Contender("headroom, no narrowing", "headroom", 1.0, False),
    Contender("headroom + narrowing", "headroom", 1.0, True),
    Contender("headroom + deciding (default)", "headroom", 1.0, True, decide=True),
)


@dataclass(frozen=True)
class Setup:
    nodes: int
    spot_share: float
    trace_pods: int
    max_arrived: float
    fail_streak: int
    alibaba_nodes: Path | None = None
    alibaba_pods: Path | None = None
    openb: str = ""  # "gpu" | "all": the paper's setting (see the module docstring)
    price_file: str | None = None  # on top of the bundled catalogue (load_pricebook)


def make_policy(name: str, seed: int) -> NodePolicy:
    if name == "random":
        return RandomFit(seed)
    if name == "dot-product":
        return DotProduct()
    return policy_by_name(name)


def workload(setup: Setup, seed: int) -> tuple[list[SimNode], list[TracePod]]:
    prices = load_pricebook(setup.price_file)
    if setup.alibaba_nodes and setup.alibaba_pods:
        paper, everything = bool(setup.openb), setup.openb == "all"
        nodes = read_alibaba_nodes(
            setup.alibaba_nodes,
            seed,
            prices,
            setup.spot_share,
            gpu_mib=OPENB_GPU_MIB if paper else None,
            cpu_nodes=everything,
        )
        mm = model_memory([n for n in nodes if n.gpu_total_mib])
        pods, _ = read_alibaba_pods(
            setup.alibaba_pods, mm, qos_capacity=not paper, cpu_only=everything
        )
        return nodes, pods
    return make_cluster(setup.nodes, seed, prices, setup.spot_share), make_trace(
        setup.trace_pods, seed
    )


def one_run(c: Contender, mode: Mode, seed: int, setup: Setup) -> Result:
    nodes, trace = workload(setup, seed)
    ctx = Context(limits=EXACT, mix=trace_mix(trace))
    return inflate(
        nodes,
        trace,
        make_policy(c.policy, seed),
        ctx,
        Weights(1.0, c.cost_weight),
        mode,
        c.narrowing,
        seed,
        c.label,
        model_memory([n for n in nodes if n.gpu_total_mib]),
        setup.max_arrived,
        setup.fail_streak,
        decide=c.decide,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.quality",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("docs"))
    ap.add_argument("--nodes", type=int, default=500, help="synthetic cluster size")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--spot-share", type=float, default=0.5)
    ap.add_argument("--max-arrived", type=float, default=1.3, help="stop at this x capacity")
    ap.add_argument("--fail-streak", type=int, default=200, help="stop after N failures in a row")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--alibaba-nodes", type=Path, help="openb_node_list CSV")
    ap.add_argument("--alibaba-pods", type=Path, help="openb_pod_list CSV")
    ap.add_argument("--no-ideal", action="store_true", help="skip the ideal-argmax runs")
    ap.add_argument(
        "--price-file",
        help="a price file (docs/pricing.md) on top of the bundled catalogue: the cluster's "
        "instance types take its prices and GPU memory",
    )
    ap.add_argument(
        "--openb",
        choices=sorted(OPENB_NODES),
        help="the openb trace from ../shared/data/openb: GPU nodes only, or all nodes with the "
        "CPU-only pods too (runs to --max-arrived whatever fails)",
    )
    ap.add_argument(
        "--only",
        action="append",
        help="a policy label to run, as the table prints it (repeatable; default: all)",
    )
    a = ap.parse_args(argv)
    if a.openb:
        a.alibaba_nodes, a.alibaba_pods = OPENB / OPENB_NODES[a.openb], OPENB / OPENB_PODS
        a.fail_streak = 10**9
    setup = Setup(
        a.nodes,
        a.spot_share,
        5000,
        a.max_arrived,
        a.fail_streak,
        a.alibaba_nodes,
        a.alibaba_pods,
        a.openb or "",
        a.price_file,
    )
    modes = (KUBE,) if a.no_ideal else (KUBE, IDEAL)
    unknown = set(a.only or ()) - {c.label for c in CONTENDERS}
    if unknown:
        ap.error(f"--only: no policy labelled {sorted(unknown)}")
    chosen = [c for c in CONTENDERS if not a.only or c.label in a.only]
    tasks = [(c, m, a.seed + r) for c in chosen for m in modes for r in range(a.repeats)]
    runs: dict[tuple[str, str], list[Result]] = {}
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        futures = [pool.submit(one_run, c, m, s, setup) for c, m, s in tasks]
        for f in tqdm(as_completed(futures), total=len(futures), desc="runs", unit="run"):
            r = f.result()
            runs.setdefault((r.label, r.mode), []).append(r)
    for done in runs.values():
        done.sort(key=lambda r: r.seed)  # "per seed" reads in seed order, not finishing order
    labels = [c.label for c in chosen]
    text = table(runs, labels)
    if a.openb:
        source = f"openb, {'all nodes, CPU-only pods too' if a.openb == 'all' else 'GPU nodes'}"
    else:
        source = "Alibaba CSV" if a.alibaba_nodes else f"synthetic, {a.nodes} nodes"
    title = f"{source}, spot share {a.spot_share:.0%}, {a.repeats} repeats, seed {a.seed}"
    a.out.mkdir(parents=True, exist_ok=True)
    stem = f"quality-openb-{a.openb}" if a.openb else "quality"
    plot_allocation(runs, labels, a.out / f"{stem}-allocation.png", title)
    plot_cost(runs, labels, a.out / f"{stem}-cost.png", title)
    name = f"openb-{a.openb}" if a.openb else ""
    if not splice(a.out / "scheduling.md", f"_{title}._\n\n{text}", name):
        print("(no table markers in scheduling.md; table printed only)", file=sys.stderr)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
