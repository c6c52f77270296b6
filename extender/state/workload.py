"""The expected workload mix (FGD's target workload), learned from the pods that arrive.

Each new GPU pod adds its shape with weight 1; older weight decays by ``decay`` per
arrival so the mix follows a changing workload (kept as growth of the newest weight,
rescaled at each publication: one update per arrival). The mix is re-published only every
``publish_every`` arrivals, and only when it moved (a new shape in the top ``top``, or a
share by more than ``tolerance``), because it is part of the scoring cache key: each
new version means every node is evaluated afresh for the next pod of every shape.
"""

from __future__ import annotations

import threading

from extender.scoring.policy import Shape, ShapeLike
from extender.state.demand import GpuDemand

DEFAULT_MIX: tuple[tuple[ShapeLike, float], ...] = (
    ((1, 8 * 1024, ""), 0.3),
    ((1, 16 * 1024, ""), 0.3),
    ((1, None, ""), 0.3),
    ((2, None, ""), 0.1),
)


class WorkloadMix:
    def __init__(
        self,
        decay: float = 0.999,
        publish_every: int = 50,
        top: int = 8,
        tolerance: float = 0.02,
    ) -> None:
        self._weights: dict[Shape, float] = {}  # in units of ``_unit``
        self._unit = 1.0  # the weight of the latest arrival
        self._decay = decay
        self._publish_every = publish_every
        self._top = top
        self._keep = 8 * top  # shapes remembered between publications
        self._tolerance = tolerance
        self._arrivals = 0
        self._lock = threading.Lock()
        self.version = 0
        self.mix: tuple[tuple[ShapeLike, float], ...] = DEFAULT_MIX

    def observe(self, demand: GpuDemand) -> None:
        if demand.count <= 0 or demand.mig_profile:
            return
        with self._lock:
            # decay as growth: instead of every older weight shrinking by ``decay``, the
            # new one grows by 1/decay (the same ratios; each arrival costs one update, not
            # one per shape); _publish brings the weights back to scale
            self._unit /= self._decay
            self._weights[demand.key] = self._weights.get(demand.key, 0.0) + self._unit
            self._arrivals += 1
            if self._arrivals % self._publish_every == 0 or self._arrivals == 1:
                self._publish()

    def _publish(self) -> None:
        self._weights = {k: w / self._unit for k, w in self._weights.items()}
        self._unit = 1.0
        ranked = sorted(self._weights.items(), key=lambda kv: -kv[1])
        self._weights = dict(ranked[: self._keep])  # bounded, whatever the workload
        top = ranked[: self._top]
        total = sum(w for _, w in top)
        mix = tuple((shape, w / total) for shape, w in top)
        if self._moved(mix):  # a new version invalidates every cached evaluation
            self.mix = mix
            self.version += 1

    def _moved(self, mix: tuple[tuple[ShapeLike, float], ...]) -> bool:
        """A different set of shapes, or a share moved by more than ``tolerance``."""
        old = dict(self.mix)
        if old.keys() != dict(mix).keys():
            return True
        return any(abs(p - old[shape]) > self._tolerance for shape, p in mix)
