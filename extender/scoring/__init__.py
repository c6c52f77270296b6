"""Scoring and placement: pure functions over plain data (no I/O, no globals)."""

from extender.scoring.framework import Evaluation, Weights, evaluate, place, priorities
from extender.scoring.model import GpuView, Limits, NodeView
from extender.scoring.policies import POLICIES, policy_by_name
from extender.scoring.policy import Context, NodePolicy, Policy

__all__ = [
    "POLICIES",
    "Context",
    "Evaluation",
    "GpuView",
    "Limits",
    "NodePolicy",
    "NodeView",
    "Policy",
    "Weights",
    "evaluate",
    "place",
    "policy_by_name",
    "priorities",
]
