"""Capacity type and GPU model from each cloud's node labels (docs/protocol.md §3)."""

from __future__ import annotations

import pytest

from extender.state.nodefacts import capacity_type, facts_from_labels

KARPENTER = "karpenter.sh/capacity-type"
EKS = "eks.amazonaws.com/capacityType"
GKE_SPOT = "cloud.google.com/gke-spot"
GKE_PREEMPTIBLE = "cloud.google.com/gke-preemptible"
GKE_POOL = "cloud.google.com/gke-nodepool"
AKS = "kubernetes.azure.com/scalesetpriority"


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({KARPENTER: "spot"}, "spot"),
        ({KARPENTER: "on-demand"}, "on-demand"),
        ({KARPENTER: "reserved"}, "reserved"),
        ({EKS: "SPOT"}, "spot"),
        ({EKS: "ON_DEMAND"}, "on-demand"),
        ({EKS: "CAPACITY_BLOCK"}, "reserved"),
        ({GKE_POOL: "gpu", GKE_SPOT: "true"}, "spot"),
        ({GKE_POOL: "gpu", GKE_PREEMPTIBLE: "true"}, "spot"),
        ({GKE_POOL: "gpu"}, "on-demand"),
        ({GKE_POOL: "gpu", GKE_SPOT: "false"}, "on-demand"),
        ({AKS: "spot"}, "spot"),
        ({AKS: "regular"}, "on-demand"),
        # Karpenter's label, where present, is the one read
        ({KARPENTER: "on-demand", GKE_SPOT: "true"}, "on-demand"),
        ({}, ""),
        ({AKS: "low"}, ""),
    ],
)
def test_capacity_type(labels: dict[str, str], expected: str) -> None:
    assert capacity_type(labels) == expected
    assert facts_from_labels("n", labels).capacity_type == expected


def test_gke_accelerator_is_the_model_hint() -> None:
    labels = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4", GKE_POOL: "t4"}
    assert facts_from_labels("n", labels).gpu_model_hint == "nvidia-tesla-t4"
    # Karpenter's catalog label wins where both are set
    labels["karpenter.k8s.aws/instance-gpu-name"] = "t4"
    assert facts_from_labels("n", labels).gpu_model_hint == "t4"
