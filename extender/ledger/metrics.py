"""Prometheus metrics of the extender's ledger side (prefix ``headroom_``).

Registry choice: one module-level ``CollectorRegistry`` (``REGISTRY``), *not*
prometheus-client's global default. Module-level because the process has exactly
one extender and threading a registry through every constructor buys nothing;
separate from the default so importing a library that registers on the default
registry cannot collide with our names or leak its metrics into ours, and so tests
can build a fresh ``LedgerMetrics(CollectorRegistry())`` without duplicate errors.

Scrapes stay cheap: counters/histograms are updated at write time; the gauges read
``ledger.active()`` (bounded by what is running now) and the chargeback gauge is
recomputed at most every ``chargeback_ttl_s`` (it scans a month of rows).

Imports run one way: the package's ``__init__`` takes ``METRICS`` from here as the
default hooks, and this module reads the ledger only through its submodules.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from extender.core.allocation import LedgerUnavailable, Observation
from extender.ledger.chargeback import chargeback_report
from extender.ledger.window import month_start
from extender.wire.clock import Clock

if TYPE_CHECKING:
    from extender.ledger.base import Ledger

MIB = 1024 * 1024
REGISTRY = CollectorRegistry(auto_describe=True)


class LedgerMetrics:
    """Write-time metrics; an instance is the ledger's ``Hooks``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.write_latency = Histogram(
            "headroom_ledger_write_seconds",
            "Ledger write transaction latency",
            ["op"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=registry,
        )
        self.discrepancies = Counter(
            "headroom_discrepancies",
            "Discrepancies opened (first seen), by kind",
            ["kind"],
            registry=registry,
        )
        self._used: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def write_seconds(self, op: str, seconds: float) -> None:
        self.write_latency.labels(op).observe(seconds)

    def discrepancy_opened(self, kind: str) -> None:
        self.discrepancies.labels(kind).inc()

    def observed(self, observations: Sequence[Observation]) -> None:
        with self._lock:
            if len(self._used) > 200_000:  # never scraped: ended pods were never pruned
                self._used.clear()
            for o in observations:
                self._used[(o.pod_uid, o.gpu_uuid)] = o.used_mib

    def last_used(self, live: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """Latest used MiB per (pod, GPU), forgetting pods no longer active."""
        with self._lock:
            for key in [k for k in self._used if k not in live]:
                del self._used[key]
            return dict(self._used)


class LedgerCollector(Collector):
    """Gauges read from the ledger at scrape time."""

    def __init__(
        self,
        get_ledger: Callable[[], Ledger],
        clock: Clock,
        metrics: LedgerMetrics,
        chargeback_ttl_s: float = 300.0,
    ) -> None:
        self.get_ledger, self.clock, self.metrics = get_ledger, clock, metrics
        self.ttl = chargeback_ttl_s
        self._cache: tuple[float, dict[str, float]] | None = None
        self._lock = threading.Lock()

    def describe(self) -> Iterator[Metric]:
        return iter(())  # no ledger read at registration time

    def collect(self) -> Iterator[Metric]:
        """Ledger gauges; skipped (not a failed scrape) while the database is down, so
        the process metrics and the counters still reach Prometheus."""
        try:
            yield from self._collect()
        except LedgerUnavailable:
            return

    def _collect(self) -> Iterator[Metric]:
        ledger = self.get_ledger()
        active = ledger.active()
        granted = GaugeMetricFamily(
            "headroom_gpu_memory_granted_bytes",
            "GPU memory granted by active allocations",
            labels=["namespace", "node", "gpu"],
        )
        count = GaugeMetricFamily(
            "headroom_allocations_active", "Active allocations", labels=["status"]
        )
        used = GaugeMetricFamily(
            "headroom_gpu_memory_used_bytes",
            "Latest GPU memory used per pod and GPU (agent reports)",
            labels=["namespace", "pod", "gpu"],
        )
        by_key: dict[tuple[str, str, str], int] = {}
        by_status: dict[str, int] = {}
        names: dict[tuple[str, str], tuple[str, str]] = {}
        for a in active:
            k = (a.pod.namespace, a.node.name, a.grant.gpu_uuid)
            by_key[k] = by_key.get(k, 0) + a.grant.memory_mib
            by_status[a.status.value] = by_status.get(a.status.value, 0) + 1
            names[(a.pod.uid, a.grant.gpu_uuid)] = (a.pod.namespace, a.pod.name)
        namespaces = GaugeMetricFamily(
            "headroom_namespace_granted_bytes",
            "GPU memory granted by active allocations, per namespace",
            labels=["namespace"],
        )
        grants = GaugeMetricFamily(
            "headroom_namespace_grants",
            "Active (pod, GPU) grants per namespace",
            labels=["namespace"],
        )
        by_ns: dict[str, tuple[int, int]] = {}
        for (ns, node, gpu), mib in sorted(by_key.items()):
            granted.add_metric([ns, node, gpu], mib * MIB)
        for a in active:
            total, n = by_ns.get(a.pod.namespace, (0, 0))
            by_ns[a.pod.namespace] = (total + a.grant.memory_mib, n + 1)
        for ns, (mib, n) in sorted(by_ns.items()):
            namespaces.add_metric([ns], mib * MIB)
            grants.add_metric([ns], n)
        for status, n in sorted(by_status.items()):
            count.add_metric([status], n)
        for (uid, gpu), mib in sorted(self.metrics.last_used(set(names)).items()):
            ns, pod = names[(uid, gpu)]
            used.add_metric([ns, pod, gpu], mib * MIB)
        yield granted
        yield namespaces
        yield grants
        yield count
        yield used
        yield self._chargeback(ledger)
        yield self._unpriced(ledger)

    @staticmethod
    def _unpriced(ledger: Ledger) -> Metric:
        """Nodes present now whose GPUs have no price: their grants are billed as
        unpriced (never $0) until a price file or the table covers their type."""
        g = GaugeMetricFamily(
            "headroom_unpriced_nodes",
            "Nodes present now with no known GPU price (their grants are unpriced)",
        )
        nodes = ledger.nodes()
        g.add_metric(
            [], sum(1 for n in nodes if n.gone_at is None and n.gpu_price_per_hour is None)
        )
        return g

    def _chargeback(self, ledger: Ledger) -> Metric:
        now = self.clock.now()
        with self._lock:
            if self._cache is None or time.monotonic() - self._cache[0] > self.ttl:
                start = month_start(now)
                report = chargeback_report(ledger, start, now, "namespace", now)
                costs = {g.key: float(g.cost) for g in report.groups if g.cost is not None}
                self._cache = (time.monotonic(), costs)
            values = self._cache[1]
        g = GaugeMetricFamily(
            "headroom_chargeback_dollars",
            "GPU memory chargeback this calendar month (UTC) so far, USD",
            labels=["namespace"],
        )
        for ns, usd in sorted(values.items()):
            g.add_metric([ns], usd)
        return g


class SchedulingMetrics:
    """What the scheduling path does, for alerting on pods stuck without GPU headroom."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.no_fit = Counter(
            "headroom_filter_no_fit",
            "Filter calls for a GPU pod that no node could host",
            ["namespace"],
            registry=registry,
        )
        self.binds = Counter("headroom_binds", "Bind outcomes", ["outcome"], registry=registry)
        # a new pod shape's pass over every candidate: inside the scheduling cycle, or
        # made ahead for a pod the pod watch announced (extender/scheduling/announced.py)
        self.passes = Counter(
            "headroom_scheduling_passes",
            "Plans evaluated over every candidate, by when: cycle (inside a filter or "
            "prioritize, which kube-scheduler waits for) or ahead (before the filter)",
            ["when"],
            registry=registry,
        )
        for when in ("cycle", "ahead"):
            self.passes.labels(when=when)  # both shown from the start, at 0
        # what kube-scheduler waits for, per verb (its httpTimeout is 5 s)
        self.request_seconds = Histogram(
            "headroom_extender_request_duration_seconds",
            "Extender verb latency as answered to kube-scheduler (body read to reply)",
            ["verb"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=registry,
        )


METRICS = LedgerMetrics(REGISTRY)
SCHEDULING = SchedulingMetrics(REGISTRY)
_attached: LedgerCollector | None = None


def attach_ledger(
    get_ledger: Callable[[], Ledger], clock: Clock, chargeback_ttl_s: float = 300.0
) -> LedgerCollector:
    """Register the scrape-time ledger gauges on ``REGISTRY`` (once per process)."""
    global _attached
    if _attached is None:
        _attached = LedgerCollector(get_ledger, clock, METRICS, chargeback_ttl_s)
        REGISTRY.register(_attached)
    else:  # a new app in the same process (tests, restarts in-process): read its ledger
        _attached.get_ledger, _attached.clock = get_ledger, clock
        _attached.ttl, _attached._cache = chargeback_ttl_s, None
    return _attached


def metrics_response(registry: CollectorRegistry = REGISTRY) -> tuple[bytes, str]:
    """(body, content type) for the lead's ``/metrics`` route."""
    return generate_latest(registry), CONTENT_TYPE_LATEST
