"""A stand-in for NVIDIA's stock device plugin with time-slicing, for the truth-loop e2e.

Like the stock plugin with ``sharing.timeSlicing.replicas: N`` it advertises each GPU as
``<UUID>::<n>`` replicas of ``nvidia.com/gpu`` and answers ``Allocate`` with
``NVIDIA_VISIBLE_DEVICES`` set to the GPUs of whatever replicas kubelet handed it. It
knows nothing of headroom's grants. Its ``GetPreferredAllocation`` is grant-blind too
but fixed: replicas of the *last* GPU first (the stock plugin balances replicas across
GPUs; either way the choice ignores the grant), so a pod granted another GPU lands on
the wrong one for certain rather than by chance, and the test can say which.

Run: ``python -m tests.e2e.stock_plugin --socket-dir DIR --gpus UUID[,UUID...]
--replicas N`` (it registers with ``DIR/kubelet.sock`` and serves until SIGTERM).
"""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from drivers.deviceplugin.api import api_pb2 as pb
from drivers.deviceplugin.api import api_pb2_grpc as pb_grpc
from drivers.deviceplugin.kubelet import register

RESOURCE = "nvidia.com/gpu"
ENDPOINT = "stock-nvidia-gpu.sock"


class StockPlugin(pb_grpc.DevicePluginServicer):
    def __init__(self, gpus: list[str], replicas: int) -> None:
        self.ids = [f"{g}::{n}" for g in gpus for n in range(replicas)]
        self.order = {g: i for i, g in enumerate(gpus)}
        self.stop = threading.Event()

    def GetDevicePluginOptions(self, request: Any, context: Any) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(get_preferred_allocation_available=True)

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[pb.ListAndWatchResponse]:
        yield pb.ListAndWatchResponse(devices=[pb.Device(ID=i, health="Healthy") for i in self.ids])
        self.stop.wait()

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        out = []
        for r in request.container_requests:
            ranked = sorted(
                r.available_deviceIDs,
                key=lambda i: (-self.order.get(i.split("::")[0], 0), i),
            )
            chosen = list(r.must_include_deviceIDs)
            chosen += [i for i in ranked if i not in chosen][: r.allocation_size - len(chosen)]
            out.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return pb.PreferredAllocationResponse(container_responses=out)

    def Allocate(self, request: Any, context: Any) -> pb.AllocateResponse:
        answers = []
        for r in request.container_requests:
            gpus = list(dict.fromkeys(i.split("::")[0] for i in r.devices_ids))
            answers.append(
                pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(gpus)})
            )
        return pb.AllocateResponse(container_responses=answers)

    def PreStartContainer(self, request: Any, context: Any) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


def main() -> int:
    p = argparse.ArgumentParser(prog="stock_plugin")
    p.add_argument("--socket-dir", type=Path, required=True)
    p.add_argument("--gpus", required=True, help="GPU UUIDs, comma-separated")
    p.add_argument("--replicas", type=int, default=4)
    args = p.parse_args()
    plugin = StockPlugin(args.gpus.split(","), args.replicas)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_DevicePluginServicer_to_server(plugin, server)
    socket = args.socket_dir / ENDPOINT
    socket.unlink(missing_ok=True)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    register(args.socket_dir / "kubelet.sock", ENDPOINT, RESOURCE)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    plugin.stop.set()
    server.stop(1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
