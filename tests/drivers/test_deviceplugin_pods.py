"""How the plugin reads a pod (kubelet's device count, terminal, deleting) and the
command's usage errors. The API calls themselves run against a real kube-apiserver in
tests/e2e/test_device_plugin.py."""

from __future__ import annotations

import datetime as dt

import pytest
from kubernetes.client import (
    V1Container,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1ResourceRequirements,
)

from drivers.deviceplugin.pods import requested, view_of
from extender.cli import main

R = "nvidia.com/gpu"


def container(name: str, gpus: int | None) -> V1Container:
    limits = {R: str(gpus), "cpu": "1"} if gpus is not None else {"cpu": "1"}
    return V1Container(name=name, resources=V1ResourceRequirements(limits=limits))


def v1pod(
    containers: list[V1Container],
    init: list[V1Container] | None = None,
    phase: str | None = "Pending",
    deleting: bool = False,
) -> V1Pod:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return V1Pod(
        metadata=V1ObjectMeta(
            name="p",
            namespace="ns",
            uid="u1",
            annotations={"headroom.dev/gpu-uuids": "GPU-a"},
            creation_timestamp=now,
            deletion_timestamp=now if deleting else None,
        ),
        spec=V1PodSpec(containers=containers, init_containers=init),
        status=V1PodStatus(phase=phase),
    )


def test_requested_counts_devices_as_kubelet_does() -> None:
    app = [container("a", 1), container("b", 2), container("c", None)]
    assert requested(v1pod(app).spec, R) == 3
    # an init container's devices are reused by the app containers: the larger count
    assert requested(v1pod([container("a", 1)], init=[container("i", 2)]).spec, R) == 2
    assert requested(v1pod([container("a", None)]).spec, R) == 0


def test_view_marks_terminal_and_deleting_pods_not_pending() -> None:
    live = view_of(v1pod([container("a", 1)]), R)
    assert (live.key, live.uid, live.requested, live.active, live.terminal) == (
        "ns/p",
        "u1",
        1,
        True,
        False,
    )
    assert live.annotations == {"headroom.dev/gpu-uuids": "GPU-a"}
    assert live.created == dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()
    failed = view_of(v1pod([container("a", 1)], phase="Failed"), R)
    assert (failed.active, failed.terminal) == (False, True)
    going = view_of(v1pod([container("a", 1)], deleting=True), R)
    assert (going.active, going.terminal) == (False, False)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--driver", "simulated", "--kubeconfig", "k"], "--node"),
        (["--node", "n", "--driver", "simulated"], "exactly one of --kubeconfig"),
        (["--node", "n", "--kubeconfig", "k", "--slots-per-gpu", "0"], "--slots-per-gpu"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(["device-plugin", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
