"""The agent's pod-resources client against a v1 ``PodResourcesLister`` served over a real
gRPC unix socket (a small server in the test stands in for kubelet's; the e2e suite runs
kubelet's own server in tests/e2e/kubeletdm)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from drivers.podresources.api import api_pb2 as pb
from drivers.podresources.api import api_pb2_grpc as pb_grpc
from drivers.podresources.client import PodResourcesClient
from extender.wire.report import ClaimDevice, ContainerReceived, DeviceIds, PodReceived

GPU0 = "GPU-aaaaaaaa-0000-0000-0000-000000000000"


class Lister(pb_grpc.PodResourcesListerServicer):
    """kubelet's answers: one pod with a device, one with a DRA claim, one with nothing."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pods(self) -> list[pb.PodResources]:
        return [
            pb.PodResources(
                name="trainer",
                namespace="ml",
                containers=[
                    pb.ContainerResources(
                        name="main",
                        devices=[
                            pb.ContainerDevices(
                                resource_name="nvidia.com/gpu", device_ids=[f"{GPU0}::3"]
                            )
                        ],
                    ),
                    pb.ContainerResources(name="sidecar"),
                ],
            ),
            pb.PodResources(
                name="claimer",
                namespace="ml",
                containers=[
                    pb.ContainerResources(
                        name="main",
                        dynamic_resources=[
                            pb.DynamicResource(
                                claim_name="c1",
                                claim_namespace="ml",
                                claim_resources=[
                                    pb.ClaimResource(
                                        driver_name="gpu.nvidia.com",
                                        pool_name="node-a",
                                        device_name="gpu-1",
                                        share_id="s-1",
                                    )
                                ],
                            )
                        ],
                    )
                ],
            ),
            pb.PodResources(
                name="web", namespace="ml", containers=[pb.ContainerResources(name="c")]
            ),
        ]

    def List(self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext):
        self.calls.append("List")
        return pb.ListPodResourcesResponse(pod_resources=self.pods())

    def Get(self, request: pb.GetPodResourcesRequest, context: grpc.ServicerContext):
        self.calls.append("Get")
        for p in self.pods():
            if (p.namespace, p.name) == (request.pod_namespace, request.pod_name):
                return pb.GetPodResourcesResponse(pod_resources=p)
        context.abort(grpc.StatusCode.NOT_FOUND, "pod not found")


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="pr", dir="/tmp"))  # unix socket paths <= 107 bytes
    yield d
    shutil.rmtree(d, ignore_errors=True)


def serve(path: Path) -> tuple[grpc.Server, Lister]:
    lister = Lister()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_PodResourcesListerServicer_to_server(lister, server)
    server.add_insecure_port(f"unix://{path}")
    server.start()
    return server, lister


TRAINER = PodReceived(
    "ml", "trainer", [ContainerReceived("main", [DeviceIds("nvidia.com/gpu", [f"{GPU0}::3"])])]
)
CLAIMER = PodReceived(
    "ml",
    "claimer",
    [
        ContainerReceived(
            "main", claims=[ClaimDevice("ml", "c1", "gpu.nvidia.com", "node-a", "gpu-1", "s-1")]
        )
    ],
)


def test_list_and_get_name_what_each_container_holds(sock_dir: Path) -> None:
    server, lister = serve(sock_dir / "kubelet.sock")
    client = PodResourcesClient(sock_dir / "kubelet.sock")
    try:
        # pods and containers holding nothing are left out; DRA devices keep their share
        assert client.list() == [TRAINER, CLAIMER]
        assert client.get("ml", "claimer") == CLAIMER
        assert client.get("ml", "web") is None  # holds no device
        assert client.get("ml", "gone") is None  # NOT_FOUND is an answer, not an error
        assert lister.calls == ["List", "Get", "Get", "Get"]
    finally:
        client.close()
        server.stop(None)


def test_no_socket_is_not_reported_and_a_later_socket_is_used(sock_dir: Path) -> None:
    client = PodResourcesClient(sock_dir / "kubelet.sock")
    assert client.list() is None  # None: not judged (never "holds nothing")
    server, _ = serve(sock_dir / "kubelet.sock")
    try:
        assert client.list() == [TRAINER, CLAIMER]
    finally:
        client.close()
        server.stop(None)


def test_a_kubelet_that_went_away_gives_none_then_is_dialled_again(sock_dir: Path) -> None:
    path = sock_dir / "kubelet.sock"
    server, _ = serve(path)
    client = PodResourcesClient(path)
    try:
        assert client.list() == [TRAINER, CLAIMER]
        server.stop(None)
        assert client.list() is None
        server, _ = serve(path)  # kubelet restarted: a new socket at the same path
        assert client.list() == [TRAINER, CLAIMER]
    finally:
        client.close()
        server.stop(None)
