"""The schedulable units an agent report measures, with who uses each.

A unit is a healthy plain GPU or one MIG instance of a MIG GPU (pods are placed on
instances, not on their parent). Beside its size and device use, each unit keeps the
per-pod use and the unattributed memory of the last report, read with the one
definition both sides share (``extender.wire.usage``), so committed memory
(``extender.state.committed``) can charge an overrunning pod for what it really holds.
"""

from __future__ import annotations

import msgspec

from extender.wire.report import GpuReport, MigReport, NodeReport
from extender.wire.usage import unit_use

PodUse = tuple[tuple[str, int], ...]  # (pod UID, MiB used on the unit), by UID


class MeasuredGpu(msgspec.Struct, frozen=True, gc=False):  # one per GPU: see scoring.model
    uuid: str
    index: int
    model: str
    total_mib: int
    used_mib: int
    mig_profile: str = ""
    parent_uuid: str = ""
    parent_total_mib: int = 0  # a MIG instance's parent GPU: what its price is a share of
    unattributed_mib: int = 0  # used by no known pod (driver, unmapped processes)
    pod_used: PodUse = ()  # every pod the report saw on the unit, containers summed


def measured_gpus(report: NodeReport) -> tuple[MeasuredGpu, ...]:
    """Schedulable units of a report: healthy plain GPUs, and MIG instances of MIG GPUs."""
    out: list[MeasuredGpu] = []
    for g in report.gpus:
        if not g.healthy:
            continue
        if g.mig_enabled:
            out.extend(_mig_units(g))
        else:
            pods, unattributed = _use(g)
            out.append(
                MeasuredGpu(
                    g.uuid,
                    g.index,
                    g.model,
                    g.memory_total_mib,
                    g.memory_used_mib,
                    unattributed_mib=unattributed,
                    pod_used=pods,
                )
            )
    return tuple(out)


def _mig_units(g: GpuReport) -> list[MeasuredGpu]:
    out = []
    for m in g.mig:
        pods, unattributed = _use(m)
        out.append(
            MeasuredGpu(
                m.uuid,
                g.index,
                g.model,
                m.memory_total_mib,
                m.memory_used_mib,
                m.profile,
                g.uuid,
                g.memory_total_mib,
                unattributed_mib=unattributed,
                pod_used=pods,
            )
        )
    return out


def _use(unit: GpuReport | MigReport) -> tuple[PodUse, int]:
    """The unit's per-pod use (sorted by pod UID, so equal reports give equal units) and
    its unattributed memory."""
    pods, unattributed = unit_use(unit)
    return (tuple(sorted(pods.items())) if pods else ()), unattributed
