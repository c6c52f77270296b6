"""How often an ongoing discrepancy is written again.

Every agent report (each node, every few seconds) re-finds each open discrepancy — a
leaked process, an overrun — and writing each re-finding is a ledger transaction: at
5,000 nodes that was most of the ledger writer's time, and its thread competes with the
scheduling path for the interpreter (docs/BENCHMARKS.md). A finding is passed on when
it is new, when its amount exceeds what was last written, or when ``refresh_s`` have
passed since it was last written; ``refresh_s`` stays well under the ledger's
persistence gap (300 s), so an ongoing finding never looks over. In memory only: after
a restart the next report writes each finding once.
"""

from __future__ import annotations

from extender.scheduling.discrepancies import Discrepancy

REFRESH_S = 60.0

_Key = tuple[str, str, str, str]


class DiscrepancyThrottle:
    def __init__(self, refresh_s: float = REFRESH_S) -> None:
        self._refresh_s = refresh_s
        self._written: dict[_Key, tuple[float, int]] = {}  # -> (written at, amount)
        self._pruned_at = 0.0

    def due(self, found: list[Discrepancy], now: float) -> list[Discrepancy]:
        """The findings to write now (the caller writes them: ``written`` is assumed)."""
        out = []
        for d in found:
            key = (d.kind.value, d.node, d.gpu_uuid, d.pod_uid)
            last = self._written.get(key)
            if last is None or now - last[0] >= self._refresh_s or d.amount_mib > last[1]:
                self._written[key] = (now, d.amount_mib)
                out.append(d)
        if now - self._pruned_at >= self._refresh_s:  # bounded: ended findings go
            horizon = 2 * self._refresh_s
            self._written = {k: v for k, v in self._written.items() if now - v[0] < horizon}
            self._pruned_at = now
        return out
