"""The device plugin over real gRPC unix sockets: this test plays kubelet.

It serves kubelet's ``Registration`` service on ``<dir>/kubelet.sock``, lets the plugin's
runner register, then calls ``ListAndWatch``, ``GetPreferredAllocation`` and ``Allocate`` on
the socket the plugin named, as kubelet's device manager does. Pods come from a small
in-memory ``PodSource`` (the e2e test reads them from a real kube-apiserver).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from drivers.deviceplugin.api import api_pb2 as pb
from drivers.deviceplugin.api import api_pb2_grpc as pb_grpc
from drivers.deviceplugin.checkpoint import Checkpoint
from drivers.deviceplugin.devices import DeviceState
from drivers.deviceplugin.grants import PodView
from drivers.deviceplugin.kubelet import PluginRunner
from drivers.deviceplugin.service import DevicePluginService
from drivers.gpu.base import GpuDevice, Health
from extender.wire.annotations import ANN_ALLOCATED, ANN_GPU_MEMORY_MIB, ANN_GPU_UUIDS

G0, G1 = "GPU-1111", "GPU-2222"
RESOURCE = "nvidia.com/gpu"


class FlakyGpus:
    """A ``GpuDriver`` whose GPUs' health the test sets."""

    name = "simulated"

    def __init__(self) -> None:
        self.bad: set[str] = set()

    def driver_version(self) -> str | None:
        return "test"

    def sample(self) -> list[GpuDevice]:
        return [
            GpuDevice(u, i, "A10G", 24576, 0, 24576, health=Health(u not in self.bad, "lost"))
            for i, u in enumerate((G0, G1))
        ]

    def close(self) -> None:
        pass


@dataclass
class MemoryPods:
    """``PodSource`` in memory; ``annotate`` updates the stored pod like a PATCH."""

    items: dict[str, PodView] = field(default_factory=dict)
    fail_annotate: bool = False

    def add(self, name: str, gpus: list[str], mib: int = 8192, created: float = 0.0) -> None:
        ann = {ANN_GPU_UUIDS: ",".join(gpus), ANN_GPU_MEMORY_MIB: str(mib)}
        self.items[name] = PodView(f"uid-{name}", "ns", name, ann, len(gpus), created)

    def pods(self) -> list[PodView]:
        return list(self.items.values())

    def annotate(self, pod: PodView, key: str, value: str) -> None:
        if self.fail_annotate:
            raise RuntimeError("API server unavailable")
        cur = self.items[pod.name]
        self.items[pod.name] = replace(cur, annotations={**cur.annotations, key: value})


class FakeKubelet(pb_grpc.RegistrationServicer):
    """kubelet's registration server: records every Register."""

    def __init__(self, socket_dir: Path) -> None:
        self.socket = socket_dir / "kubelet.sock"
        self.requests: list[Any] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pb_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{self.socket}")
        self.server.start()

    def Register(self, request: Any, context: Any) -> Any:
        self.requests.append(request)
        return pb.Empty()

    def stop(self) -> None:
        self.server.stop(0).wait(2)


@dataclass
class Node:
    dir: Path
    driver: FlakyGpus
    devices: DeviceState
    pods: MemoryPods
    service: DevicePluginService
    runner: PluginRunner
    kubelet: FakeKubelet
    stop: threading.Event

    def plugin(self) -> Any:
        ch = grpc.insecure_channel(f"unix://{self.runner.socket}")
        return pb_grpc.DevicePluginStub(ch)

    def allocate(self, *ids: str) -> Any:
        req = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
        return self.plugin().Allocate(req, timeout=5)


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def node() -> Iterator[Node]:
    # a short path: unix socket paths are limited to 107 bytes
    d = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp")) / "device-plugins"
    d.mkdir()
    driver = FlakyGpus()
    devices = DeviceState(driver, per_gpu=2)
    pods = MemoryPods()
    stop = threading.Event()
    service = DevicePluginService(
        devices, pods, Checkpoint(d / "headroom.checkpoint.json"), stop, watch_interval_s=0.1
    )
    kubelet = FakeKubelet(d)
    runner = PluginRunner(service, d, RESOURCE, check_interval_s=0.1)
    t = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    t.start()
    wait_for(runner.registered.is_set)
    yield Node(d, driver, devices, pods, service, runner, kubelet, stop)
    stop.set()
    t.join(5)
    kubelet.stop()
    shutil.rmtree(d.parent, ignore_errors=True)


def test_registers_the_resource_and_its_socket_with_kubelet(node: Node) -> None:
    (req,) = node.kubelet.requests
    assert (req.version, req.resource_name) == ("v1beta1", RESOURCE)
    assert req.endpoint == "headroom-nvidia.com-gpu.sock"
    assert req.options.get_preferred_allocation_available
    assert (node.dir / req.endpoint).is_socket()
    opts = node.plugin().GetDevicePluginOptions(pb.Empty(), timeout=5)
    assert opts.get_preferred_allocation_available and not opts.pre_start_required


def test_list_and_watch_streams_slots_and_an_unhealthy_gpu(node: Node) -> None:
    stream = node.plugin().ListAndWatch(pb.Empty(), timeout=10)
    first = next(stream)
    assert [(d.ID, d.health) for d in first.devices] == [
        ("GPU-1111::0", "Healthy"),
        ("GPU-1111::1", "Healthy"),
        ("GPU-2222::0", "Healthy"),
        ("GPU-2222::1", "Healthy"),
    ]
    node.driver.bad.add(G1)
    node.devices.refresh()
    second = next(stream)
    assert {d.ID: d.health for d in second.devices}["GPU-2222::1"] == "Unhealthy"
    assert {d.ID: d.health for d in second.devices}["GPU-1111::0"] == "Healthy"
    stream.cancel()


def test_preferred_allocation_steers_kubelet_to_the_granted_gpu(node: Node) -> None:
    node.pods.add("p", [G1])
    req = pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=["GPU-1111::0", "GPU-1111::1", "GPU-2222::1"],
                allocation_size=1,
            )
        ]
    )
    resp = node.plugin().GetPreferredAllocation(req, timeout=5)
    assert list(resp.container_responses[0].deviceIDs) == ["GPU-2222::1"]


def test_allocate_answers_the_grant_and_acknowledges_it(node: Node) -> None:
    node.pods.add("p", [G1], mib=8192)
    resp = node.allocate("GPU-2222::0")
    (c,) = resp.container_responses
    assert dict(c.envs) == {
        "NVIDIA_VISIBLE_DEVICES": G1,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "8192m",
    }
    assert [d.name for d in c.cdi_devices] == [f"nvidia.com/gpu={G1}"]
    assert node.pods.items["p"].annotations[ANN_ALLOCATED] == "GPU-2222::0"


def test_allocate_fails_closed_on_devices_of_no_grant(node: Node) -> None:
    node.pods.add("p", [G1])
    with pytest.raises(grpc.RpcError) as err:
        node.allocate("GPU-1111::0")
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "not on the GPUs granted" in str(err.value.details())
    assert "ns/p -> GPU-2222" in str(err.value.details())
    assert ANN_ALLOCATED not in node.pods.items["p"].annotations


def test_allocate_fails_closed_when_two_pods_could_be_the_one(node: Node) -> None:
    node.pods.add("a", [G0])
    node.pods.add("b", [G0])
    with pytest.raises(grpc.RpcError) as err:
        node.allocate("GPU-1111::1")
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "cannot tell which pod" in str(err.value.details())


def test_a_failed_acknowledgement_fails_allocate_and_keeps_the_grant_pending(node: Node) -> None:
    node.pods.add("p", [G0])
    node.pods.fail_annotate = True
    with pytest.raises(grpc.RpcError) as err:
        node.allocate("GPU-1111::0")
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert node.service.checkpoint.get(["GPU-1111::0"]) is None
    node.pods.fail_annotate = False
    assert node.allocate("GPU-1111::1").container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == G0


def test_re_allocate_after_a_kubelet_restart_answers_the_same(node: Node) -> None:
    node.pods.add("p", [G0, G1], mib=4096)
    first = node.allocate("GPU-1111::1", "GPU-2222::0")
    # kubelet restarts: removes every socket, serves a new kubelet.sock; the plugin must
    # notice, serve again and re-register
    node.kubelet.stop()
    for f in node.dir.iterdir():
        if f.is_socket():
            f.unlink()
    node.kubelet = FakeKubelet(node.dir)
    wait_for(lambda: len(node.kubelet.requests) == 1)
    wait_for(lambda: node.runner.socket.is_socket())
    again = node.allocate("GPU-2222::0", "GPU-1111::1")
    assert again == first
    # the checkpoint lost too (a rebuilt disk): the pod's acknowledgement answers
    node.service.checkpoint.drop(("GPU-1111::1", "GPU-2222::0"))
    assert node.allocate("GPU-1111::1", "GPU-2222::0") == first
    # a set that only overlaps the acknowledged one is not that pod: refused
    with pytest.raises(grpc.RpcError) as err:
        node.allocate("GPU-2222::0")
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_a_deleted_pod_releases_its_answer(node: Node) -> None:
    node.pods.add("p", [G0])
    node.allocate("GPU-1111::0")
    del node.pods.items["p"]
    node.pods.add("q", [G1])
    node.allocate("GPU-2222::0")
    assert node.service.checkpoint.get(["GPU-1111::0"]) is None
    with pytest.raises(grpc.RpcError):
        node.allocate("GPU-1111::0")  # nobody holds a grant there any more


def test_a_pod_that_finished_or_was_rejected_releases_its_answer(node: Node) -> None:
    node.pods.add("p", [G0])
    node.allocate("GPU-1111::0")
    node.pods.items["p"] = replace(node.pods.items["p"], active=False, terminal=True)
    node.pods.add("q", [G1])
    node.allocate("GPU-2222::0")
    assert node.service.checkpoint.get(["GPU-1111::0"]) is None
