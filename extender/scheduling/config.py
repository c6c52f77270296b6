"""The scheduling service's settings, one object passed down (``extender.wiring`` fills
it from ``extender.settings``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from extender.scoring import Limits, Weights

# kube-scheduler binds pods concurrently (its binding cycles run apart from scheduling):
# this many binds run at once, and as many ledger calls, so that every bind waiting on
# the ledger can join the same transaction (group commit, extender/ledger/group.py)
BIND_WORKERS = 16


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    stale_after: float = 30.0
    limits: Limits = field(default_factory=Limits)
    weights: Weights = field(default_factory=Weights)
    narrow_epsilon: float | None = None  # None: filter passes every fitting node
    # with narrowing, a pod stating no preference of its own gets one node from the
    # filter, so kube-scheduler binds it without prioritize (narrowing.passing)
    decide: bool = False
    refresh_shapes: int = 2  # plans brought up to date after a report or bind (hotshapes)
    refresh_window: float = 10.0  # ... for the shapes filtered within this many seconds
    # pods the pod watch saw pending get their plans made before their filter, for at
    # most this many shapes waiting at once (announced.py); 0: none
    plan_ahead: int = 4
    # a second bind of a pod waits this long for the first (below the scheduler's 5 s
    # extender httpTimeout, so the wait itself is answered before the scheduler gives up)
    bind_wait: float = 4.0
    # the bind path's ledger calls answer within this even if the database is frozen
    ledger_deadline: float = 3.5
    # a grant on a node labelled for headroom's device plugin waits at most this long for
    # the plugin's acknowledgement before the node takes the next GPU pod (acks.py)
    ack_timeout: float = 60.0
