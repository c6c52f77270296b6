"""The policy interface: one small unit per placement strategy, chosen by configuration.

As in kube-scheduler's noderesources strategies, a policy maps plain numbers to a
choice and a score; ``extender.scoring.framework`` walks the nodes and calls it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from extender.scoring.batch import Bools, Floats, GpuBatch, Ints
from extender.scoring.fit import unit_mib
from extender.scoring.model import GpuDemand, GpuView, Limits, NodeView, Shape, ShapeLike


@dataclass(frozen=True, slots=True)
class Context:
    limits: Limits = field(default_factory=Limits)
    # The expected workload (FGD's "target workload"): shapes with probabilities summing to 1.
    mix: tuple[tuple[ShapeLike, float], ...] = ((Shape(1, None), 1.0),)


class NodePolicy(Protocol):
    """What ``framework.evaluate`` needs of a policy: a choice and a score on one node
    (the quality bench's baselines stop here)."""

    name: str

    def place(
        self, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
    ) -> tuple[GpuView, ...]:
        """Pick ``demand.count`` GPUs from ``fitting`` (which has at least that many)."""
        ...

    def score(
        self, node: NodeView, demand: GpuDemand, chosen: tuple[GpuView, ...], ctx: Context
    ) -> float:
        """Raw preference for this node given the choice; higher is better, any scale."""
        ...


class Policy(NodePolicy, Protocol):
    """A policy the extender runs: ``NodePolicy`` and its vectorised score."""

    def score_batch(self, batch: GpuBatch, demand: GpuDemand, hold: Bools, ctx: Context) -> Floats:
        """``score(place(...))`` for every row of a batch of nodes that fit a plain
        (non-MIG) demand; ``hold`` marks the slots that can hold one unit. Must equal
        the per-node methods exactly (``tests/test_batch_scoring.py``)."""
        ...


class RowEvaluator(Protocol):
    """What a policy with a vectorised evaluation adds: ``evaluate_batch`` for some rows of
    a batch, read in place (no ``take``) — the filter evaluates rows of the inventory's
    columns. Optional: the framework takes the rows for policies without it."""

    def evaluate_rows(
        self, batch: GpuBatch, rows: Ints, demand: GpuDemand, ctx: Context
    ) -> tuple[Bools, Floats]:
        """(fits, raw) per row (-1: unavailable, never fits; raw 0 where it does not
        fit), exactly ``evaluate_batch(batch.take(rows))`` for the available rows."""
        ...


@runtime_checkable
class HostScorer(Protocol):
    """What a policy adds to score pods that ask no GPU (``extender.scoring.hostonly``);
    optional: without it such pods get flat scores and the in-tree scores alone choose."""

    def score_host_rows(
        self, batch: GpuBatch, rows: Ints, demand: GpuDemand, ctx: Context
    ) -> Floats:
        """Raw score per row of ``rows`` (-1: no usable report, scored 0)."""
        ...


def node_fill_after(
    node: NodeView, demand: GpuDemand, chosen: Sequence[GpuView], lim: Limits
) -> float:
    """Fraction of the node's GPU memory committed once the pod is placed."""
    total = node.total_mib
    if total <= 0:
        return 0.0
    added = sum(unit_mib(g, demand, lim) for g in chosen)
    return min(1.0, (node.committed_mib + added) / total)


def host_fill_after(node: NodeView, demand: GpuDemand, gpu_fill: float) -> float:
    """The node's fill once the pod is placed over GPU and CPU, the leftover best fit
    measures: the mean of ``gpu_fill`` and the CPU fill, or ``gpu_fill`` alone when the
    node's CPU is not known. A GPU pod on a node whose CPU is nearly gone is what strands
    that node's other GPUs, so a packed node is one packed in both."""
    alloc = node.cpu_allocatable_milli
    if alloc <= 0:
        return gpu_fill
    return 0.5 * gpu_fill + 0.5 * min(1.0, (node.cpu_requested_milli + demand.cpu_milli) / alloc)


def chosen_fill_after(demand: GpuDemand, chosen: Sequence[GpuView], lim: Limits) -> float:
    """Fraction of the chosen GPUs' memory committed once the pod is placed."""
    total = sum(g.total_mib for g in chosen)
    if total <= 0:
        return 0.0
    used = sum(min(g.total_mib, g.committed_mib + unit_mib(g, demand, lim)) for g in chosen)
    return used / total


def best_fit(fitting: Sequence[GpuView], count: int, lim: Limits) -> tuple[GpuView, ...]:
    """The ``count`` fitting GPUs with the least headroom (ties: lowest index)."""
    ordered = sorted(fitting, key=lambda g: (g.free_mib(lim.margin_mib), g.index))
    return tuple(ordered[:count])


def by_index(fitting: Sequence[GpuView], count: int) -> tuple[GpuView, ...]:
    """The ``count`` fitting GPUs (MIG instances) with the lowest index: all are alike."""
    return tuple(sorted(fitting, key=lambda g: g.index)[:count])
