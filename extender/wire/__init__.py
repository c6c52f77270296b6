"""The wire package: where the node side (``drivers/``) and the extender meet.

Both sides import it and it imports nothing else from either (an import contract in
pyproject.toml checks this in CI), so a change to the scheduler cannot break the agent
and the agent cannot reach into the scheduler. It holds:

- ``protocol``: kube-scheduler's HTTP extender wire types (extender protocol v1);
- ``report``: the agent report schema v1 (``NodeReport`` ... ``ReportResponse``);
- ``annotations``: the pod annotation keys headroom reads and writes;
- ``usage``: pure report arithmetic (per-pod usage, leaks, unattributed memory),
  defined once so the agent's ``/metrics`` and the extender's ledger count alike;
- the small runtime both processes stand on: ``clock`` (one clock, manual in tests),
  ``logs`` (one JSON log format), ``tls`` (certificate reload), ``version``.

The names below are the ones most callers need; the submodules hold the rest.
"""

from extender.wire.clock import Clock, ManualClock, SystemClock
from extender.wire.report import (
    SCHEMA_V1,
    GpuReport,
    MigReport,
    NodeReport,
    PodGrant,
    ProcessReport,
    ReportResponse,
    report_decoder,
    validate_report,
)
from extender.wire.usage import (
    Leak,
    PodUsage,
    find_leaks,
    grants_by_pod,
    pod_usage,
    unattributed_mib,
)
from extender.wire.version import __version__

__all__ = [
    "SCHEMA_V1",
    "Clock",
    "GpuReport",
    "Leak",
    "ManualClock",
    "MigReport",
    "NodeReport",
    "PodGrant",
    "PodUsage",
    "ProcessReport",
    "ReportResponse",
    "SystemClock",
    "__version__",
    "find_leaks",
    "grants_by_pod",
    "pod_usage",
    "report_decoder",
    "unattributed_mib",
    "validate_report",
]
