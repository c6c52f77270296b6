"""Per-node gauges for operators: GPU memory headroom and the age of each node's last
report, labelled by node only (bounded cardinality: nodes, not pods or GPUs). Read from
the inventory at scrape time, so a node that is gone is gone from the metrics too."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from extender.ledger.metrics import MIB, REGISTRY
from extender.state.snapshot import NodeRow


class NodeGauges(Collector):
    def __init__(self, rows: Callable[[], list[NodeRow]]) -> None:
        self.rows = rows

    def describe(self) -> Iterator[Metric]:
        return iter(())  # nothing read at registration time

    def collect(self) -> Iterator[Metric]:
        headroom = GaugeMetricFamily(
            "headroom_node_gpu_headroom_bytes",
            "GPU memory a new pod could still be given on the node, summed over its GPUs"
            " (total - committed, committed counting overruns and unattributed memory)",
            labels=["node"],
        )
        age = GaugeMetricFamily(
            "headroom_node_report_age_seconds",
            "Seconds since the node's agent report reached the extender",
            labels=["node"],
        )
        for n in self.rows():
            headroom.add_metric([n.name], n.headroom_mib * MIB)
            age.add_metric([n.name], n.report_age_s)
        yield headroom
        yield age


_attached: NodeGauges | None = None


def attach_nodes(rows: Callable[[], list[NodeRow]]) -> NodeGauges:
    """Register the node gauges on ``REGISTRY`` once per process; a later app in the
    same process (tests, in-process restarts) points them at its own inventory."""
    global _attached
    if _attached is None:
        _attached = NodeGauges(rows)
        REGISTRY.register(_attached)
    else:
        _attached.rows = rows
    return _attached
