"""The quality evaluator: kube-scheduler arithmetic, trace readers, and the metrics' bookkeeping
on a tiny cluster and on the Alibaba-format sample."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.quality.__main__ import CONTENDERS, Setup, main, make_policy, workload
from bench.quality.cluster import SPOT, SimNode, make_cluster, model_memory, read_alibaba_nodes
from bench.quality.report import END, START
from bench.quality.run import Result, inflate
from bench.quality.scheduler import (
    IDEAL,
    KUBE,
    Mode,
    Scheduler,
    balanced_allocation,
    in_tree_fits,
    least_allocated,
    num_feasible_to_find,
)
from bench.quality.trace import (
    TracePod,
    alibaba_pod,
    make_trace,
    read_alibaba_pods,
    trace_mix,
)
from extender.pricing import load_pricebook
from extender.scoring import Context, Limits, Weights
from extender.state.demand import CapacityPref, GpuDemand

GIB = 1024
SAMPLE = Path(__file__).resolve().parents[1] / "bench" / "quality" / "sample"
EXACT = Limits(margin_mib=0, idle_mib=0)


@pytest.mark.parametrize(
    ("n", "want"), [(50, 50), (100, 100), (300, 144), (1000, 420), (6000, 300), (200, 100)]
)
def test_num_feasible_nodes_to_find(n: int, want: int) -> None:
    # 300: (50 - 2)% = 144; 1000: 42%; 6000: 50 - 48 = 2% < 5% -> 5%; 200: 48% = 96 < 100
    assert num_feasible_to_find(n) == want


def tiny_node() -> SimNode:
    nodes = make_cluster(1, 1, load_pricebook())
    n = nodes[0]
    n.cpu_milli, n.memory_mib, n.cpu_used, n.mem_used = 4000, 16 * GIB, 1000, 8 * GIB
    return n


def test_in_tree_scores_by_hand() -> None:
    n = tiny_node()
    pod = TracePod("p", GpuDemand(1), frozenset(), 1000, 4 * GIB)
    # after: cpu 2000/4000 -> 50; memory 12/16 -> 25; (50 + 25) // 2
    assert least_allocated(n, pod) == 37
    # |0.5 - 0.75| / 2 = 0.125 -> int(87.5)
    assert balanced_allocation(n, pod) == 87
    assert in_tree_fits(n, pod)
    assert not in_tree_fits(n, TracePod("big", GpuDemand(1), frozenset(), 4000, GIB))
    assert not in_tree_fits(n, TracePod("m", GpuDemand(1), frozenset({"H100"}), 1, 1))


def run_tiny(
    policy: str, mode: Mode, narrowing: bool, seed: int = 3
) -> tuple[list[SimNode], Result]:
    nodes = make_cluster(40, seed, load_pricebook())
    trace = make_trace(400, seed)
    ctx = Context(limits=EXACT, mix=trace_mix(trace))
    res = inflate(
        nodes,
        trace,
        make_policy(policy, seed),
        ctx,
        Weights(1.0, 1.0),
        mode,
        narrowing,
        seed,
        policy,
        model_memory(nodes),
        max_arrived=1.2,
        fail_streak=50,
    )
    return nodes, res


@pytest.mark.parametrize(
    ("policy", "mode", "narrowing"),
    [
        ("headroom", KUBE, True),
        ("headroom", IDEAL, False),
        ("fgd", KUBE, False),
        ("random", KUBE, False),
        ("dot-product", KUBE, False),
        ("gpu-packing", KUBE, True),
    ],
)
def test_inflation_metrics_are_consistent(policy: str, mode: Mode, narrowing: bool) -> None:
    nodes, r = run_tiny(policy, mode, narrowing)
    assert r.placed + r.failed == r.arrived == len(r.curve)
    assert r.placed > 0
    assert r.od_on_spot == 0
    assert 0 < r.allocation <= 1
    for n in nodes:
        assert all(0 <= c <= t for c, t in zip(n.committed, n.gpu_total_mib, strict=True))
        assert n.cpu_used <= n.cpu_milli and n.mem_used <= n.memory_mib
    committed = sum(sum(n.committed) for n in nodes)
    assert r.allocation == pytest.approx(committed / (r.capacity_gib * GIB))
    xs, ys = [p[0] for p in r.curve], [p[1] for p in r.curve]
    assert xs == sorted(xs) and ys == sorted(ys)
    assert r.curve[-1][2] == pytest.approx(sum(n.per_hour for n in nodes if n.pods))
    assert r.idle_gpus == sum(1 for n in nodes for c in n.committed if c == 0)
    assert r.first_failure_at is None or r.failed > 0


def test_on_demand_only_pods_never_land_on_spot() -> None:
    nodes, r = run_tiny("headroom", KUBE, True, seed=5)
    assert any(n.capacity_type == SPOT and n.pods for n in nodes)  # spot was used...
    assert r.od_on_spot == 0  # ...but never by an on-demand-only pod


def test_narrowed_scheduler_picks_the_best_blend_when_alone() -> None:
    # two identical empty nodes but one is spot: narrowing passes only the cheaper one
    nodes = make_cluster(2, 1, load_pricebook())
    a, b = nodes
    b.instance_type, b.model, b.gpu_total_mib = a.instance_type, a.model, a.gpu_total_mib
    b.committed, b.cpu_milli, b.memory_mib = [0] * len(a.gpu_total_mib), a.cpu_milli, a.memory_mib
    a.capacity_type, b.capacity_type = "on-demand", SPOT
    a.per_gib_hour, b.per_gib_hour = 0.10, 0.04
    trace = make_trace(50, 1)
    pod = TracePod("p", GpuDemand(1, 2 * GIB), frozenset(), 100, 100)
    s = Scheduler(
        nodes,
        make_policy("headroom", 1),
        Context(limits=EXACT, mix=trace_mix(trace)),
        Weights(1.0, 1.0),
        KUBE,
        True,
        seed=1,
    )
    got = s.schedule(pod)
    assert got is not None and got[0].name == b.name


def test_alibaba_sample_reads_as_documented() -> None:
    nodes = read_alibaba_nodes(SAMPLE / "nodes.csv", 1, load_pricebook())
    assert len(nodes) == 6  # the CPU-only node is skipped
    mm = model_memory(nodes)
    assert set(mm) == {"V100M32", "V100M16", "T4", "A10", "G2"}
    pods, skipped = read_alibaba_pods(SAMPLE / "pods.csv", mm)
    rows = (SAMPLE / "pods.csv").read_text().splitlines()[1:]
    cpu_only = sum(1 for r in rows if r.split(",")[3] == "0")
    assert skipped == cpu_only > 0 and len(pods) == len(rows) - cpu_only


def row(num_gpu: str, milli: str, spec: str, qos: str) -> dict[str, str]:
    return {
        "name": "p",
        "cpu_milli": "4000",
        "memory_mib": "8192",
        "num_gpu": num_gpu,
        "gpu_milli": milli,
        "gpu_spec": spec,
        "qos": qos,
    }


def test_alibaba_mapping() -> None:
    mm = {"T4": [16 * GIB] * 4, "V100M32": [32 * GIB] * 8, "A10": [24 * GIB] * 2}
    p = alibaba_pod(row("1", "500", "T4", "LS"), mm)
    assert p is not None
    od = CapacityPref.ON_DEMAND
    t4 = frozenset({"T4"})
    assert p.demand == GpuDemand(
        1, 8 * GIB, capacity=od, cpu_milli=4000, host_memory_mib=8192, models=t4
    )
    assert p.models == frozenset({"T4"})
    # no spec: a share of the smallest GPU in the cluster, so it fits everywhere
    p = alibaba_pod(row("1", "250", "nan", "BE"), mm)
    assert p is not None and p.demand.memory_mib == 4 * GIB and p.models == frozenset()
    assert p.demand.capacity is CapacityPref.ANY
    p = alibaba_pod(row("1", "100", "V100M32|A10", "Burstable"), mm)
    assert p is not None and p.demand.memory_mib == 2458  # ceil(0.1 x 24576)
    p = alibaba_pod(row("4", "1000", "", "Guaranteed"), mm)
    assert p is not None
    assert p.demand == GpuDemand(4, None, capacity=od, cpu_milli=4000, host_memory_mib=8192)
    assert alibaba_pod(row("0", "0", "", "BE"), mm) is None
    # openb as its paper runs it: any capacity type, CPU-only pods as pods asking no GPU
    p = alibaba_pod(row("1", "500", "", "LS"), mm, qos_capacity=False)
    assert p is not None and p.demand.capacity is CapacityPref.ANY
    p = alibaba_pod(row("0", "0", "", "BE"), mm, cpu_only=True)
    assert p is not None and p.demand == GpuDemand(0, cpu_milli=4000, host_memory_mib=8192)


def test_synthetic_trace_matches_its_documented_shares() -> None:
    pods = make_trace(6000, 2)
    whole = sum(1 for p in pods if p.demand.memory_mib is None and p.demand.count == 1)
    multi = sum(1 for p in pods if p.demand.memory_mib is None and p.demand.count > 1)
    pinned = sum(1 for p in pods if p.models)
    od = sum(1 for p in pods if p.on_demand_only)
    assert whole / len(pods) == pytest.approx(0.30, abs=0.03)
    assert multi / len(pods) == pytest.approx(0.10, abs=0.02)
    assert pinned / len(pods) == pytest.approx(0.3025, abs=0.02)  # sum of share x pinned
    assert od / len(pods) == pytest.approx(0.345, abs=0.03)


def test_main_on_the_sample_writes_table_and_plots(tmp_path: Path) -> None:
    doc = tmp_path / "scheduling.md"
    doc.write_text(f"intro\n{START}\nold\n{END}\noutro\n")
    argv = [
        "--alibaba-nodes",
        str(SAMPLE / "nodes.csv"),
        "--alibaba-pods",
        str(SAMPLE / "pods.csv"),
        "--repeats",
        "1",
        "--jobs",
        "1",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    text = doc.read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n") and "old" not in text
    for c in CONTENDERS:
        assert f"| {c.label} |" in text
    assert (tmp_path / "quality-allocation.png").stat().st_size > 10_000
    assert (tmp_path / "quality-cost.png").stat().st_size > 10_000


def test_a_price_file_changes_the_synthetic_cluster_s_gpus() -> None:
    """``--price-file`` puts a catalogue under the evaluator's cluster: the file that
    reproduces issue 25's synthetic bar gives A10G, L4 and L40S their binary-GiB memory
    (the bundled catalogue has AWS's figures, docs/scheduling.md)."""
    catalogue = str(Path(__file__).resolve().parents[1] / "bench/quality/prices-binary-gib.json")
    memory: dict[str | None, dict[str, set[int]]] = {}
    for price_file in (None, catalogue):
        nodes, _ = workload(Setup(60, 0.5, 10, 1.3, 200, price_file=price_file), seed=1)
        by_model: dict[str, set[int]] = {}
        for n in nodes:
            by_model.setdefault(n.model, set()).update(n.gpu_total_mib)
        memory[price_file] = by_model
    assert memory[None]["A10G"] == {22_888} and memory[catalogue]["A10G"] == {24_576}
    assert memory[None]["L40S"] == {45_776} and memory[catalogue]["L40S"] == {49_152}
    assert memory[None]["H100"] == memory[catalogue]["H100"] == {81_920}
