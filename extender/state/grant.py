"""A pod's reservation of memory on one GPU, and a report the inventory refuses: the
plain values the inventory's callers hand it (re-exported by ``state.inventory``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Grant:
    pod_uid: str
    namespace: str
    name: str
    node: str
    gpu_uuid: str
    memory_mib: int  # reserved on that GPU (a whole GPU reserves its total)


class ReportRefused(ValueError):
    """An agent report that would corrupt another node's state; the message says why."""
