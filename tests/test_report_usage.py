"""One definition of unattributed memory: the agent's /metrics and the extender's
"unaccounted" finding read the same number (``extender.wire.usage``) from a report."""

from __future__ import annotations

from extender.core.allocation import EventKind, Observation
from extender.scheduling.discrepancies import UNACCOUNTED_THRESHOLD_MIB, discrepancies, observations
from extender.state.inventory import Grant
from extender.wire.report import GpuReport, MigReport, NodeReport, ProcessReport
from extender.wire.usage import pods_measured, unattributed_mib


def node(*gpus: GpuReport) -> NodeReport:
    return NodeReport(node="n1", sampled_at=0.0, gpus=list(gpus))


def unaccounted(report: NodeReport) -> dict[str, int]:
    found = discrepancies(report, [])
    return {d.gpu_uuid: d.amount_mib for d in found if d.kind == EventKind.UNACCOUNTED}


def test_memory_on_a_mig_gpu_counts_the_pods_on_its_instances() -> None:
    inst = MigReport("MIG-a", "3g.40gb", 40960, 9000, processes=[ProcessReport(7, 8000, "p")])
    gpu = GpuReport("GPU-m", 0, "A100", 81920, 12000, mig_enabled=True, mig=[inst])
    assert unattributed_mib(gpu) == 4000  # 12000 used, 8000 of it pod p's on MIG-a
    assert unaccounted(node(gpu)) == {"GPU-m": 4000}


def test_an_unmapped_process_of_unknown_size_is_unattributed() -> None:
    procs = [ProcessReport(1, 1000, "p"), ProcessReport(2, None, None, unmapped_reason="gone")]
    gpu = GpuReport("GPU-0", 0, "L4", 23034, 5000, processes=procs)
    assert pods_measured(gpu) and unattributed_mib(gpu) == 4000
    assert unaccounted(node(gpu)) == {"GPU-0": 4000}


def test_no_finding_while_a_pods_process_has_no_size() -> None:
    # the 4000 MiB may be pod p's: counted as unattributed, but not blamed on "no pod"
    gpu = GpuReport("GPU-0", 0, "L4", 23034, 4000, processes=[ProcessReport(1, None, "p")])
    assert not pods_measured(gpu) and unattributed_mib(gpu) == 4000
    assert unaccounted(node(gpu)) == {}


def test_the_drivers_own_share_is_not_a_finding() -> None:
    used = 1000 + UNACCOUNTED_THRESHOLD_MIB
    gpu = GpuReport("GPU-0", 0, "L4", 23034, used, processes=[ProcessReport(1, 1000, "p")])
    assert unattributed_mib(gpu) == UNACCOUNTED_THRESHOLD_MIB
    assert unaccounted(node(gpu)) == {}


def test_observations_are_pod_usage_per_gpu_or_instance() -> None:
    whole = [
        ProcessReport(1, 1000, "p", "c1", sm_util=10.0),
        ProcessReport(2, 500, "p", "c2"),
        ProcessReport(3, 200, "q", "c3"),
    ]
    inst = MigReport("MIG-a", "1g.10gb", 9856, 600, processes=[ProcessReport(4, 600, "p")])
    gpus = [
        GpuReport("GPU-0", 0, "H100", 81920, 1700, processes=whole),
        GpuReport("GPU-1", 1, "H100", 81920, 600, mig_enabled=True, mig=[inst]),
    ]
    assert observations(node(*gpus)) == [
        Observation("p", "GPU-0", 1500, 10.0),
        Observation("q", "GPU-0", 200, None),
        Observation("p", "MIG-a", 600, None),
    ]
    grants = [Grant("p", "ml", "p", "n1", "GPU-0", 1024)]
    (over,) = [d for d in discrepancies(node(*gpus), grants) if d.kind == EventKind.OVERRUN]
    assert (over.pod_uid, over.gpu_uuid, over.amount_mib) == ("p", "GPU-0", 476)
