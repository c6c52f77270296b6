"""The ``v1beta1.DevicePlugin`` gRPC service kubelet calls.

Allocate's contract, in order: a device set already answered (checkpoint) gets the same
answer again, as kubelet expects when it re-Allocates a running container; otherwise the
set must sit on the GPUs of exactly one pending grant (``grants.match``), and the answer
is that grant: ``NVIDIA_VISIBLE_DEVICES`` and the CDI names of the granted GPUs, and
``CUDA_DEVICE_MEMORY_LIMIT_<i>`` of the granted memory for a HAMi-core-style limiter. The
answer is checkpointed first and the pod acknowledged second; if acknowledging fails the
checkpoint entry is withdrawn and Allocate fails, so the grant stays pending and a retried
admission is judged afresh. Every refusal is ``FAILED_PRECONDITION`` with the reason, which
kubelet shows as the pod's UnexpectedAdmissionError.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import grpc

from drivers.deviceplugin.api import api_pb2 as pb
from drivers.deviceplugin.api import api_pb2_grpc as pb_grpc
from drivers.deviceplugin.checkpoint import Answer, Checkpoint
from drivers.deviceplugin.devices import DeviceState
from drivers.deviceplugin.grants import Grant, NoMatch, PodView, grants_of, match, preferred
from drivers.deviceplugin.pods import PodSource
from drivers.deviceplugin.slots import Slot, gpu_of
from extender.wire.annotations import ANN_ALLOCATED

log = logging.getLogger("headroom.deviceplugin")

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
CDI_KIND = "nvidia.com/gpu"
"""CDI kind of the devices the answer names (``nvidia.com/gpu=<uuid>``): the one the
NVIDIA container toolkit's generated CDI spec uses for whole GPUs by UUID."""


def answer_for(grant: Grant, devices: list[str]) -> Answer:
    """The container's environment and CDI devices for its slots of ``grant``.

    GPUs are listed in grant order; ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` follows the CUDA
    index the container sees (i-th visible GPU). A grant of the whole GPU (0 MiB) sets no
    limit.
    """
    on = {gpu_of(d) for d in devices}
    gpus = [g for g in grant.gpu_uuids if g in on]
    envs = {"NVIDIA_VISIBLE_DEVICES": ",".join(gpus)}
    if grant.memory_mib > 0:
        for i in range(len(gpus)):
            envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{grant.memory_mib}m"
    return Answer(
        devices=tuple(sorted(devices)),
        pod_uid=grant.pod.uid,
        pod=grant.pod.key,
        envs=envs,
        cdi_devices=tuple(f"{CDI_KIND}={g}" for g in gpus),
    )


def acknowledged(grant: Grant, devices: list[str]) -> str:
    """The ``headroom.dev/allocated`` value once ``devices`` are added."""
    return ",".join(sorted(set(grant.allocated) | set(devices)))


def from_annotations(pods: list[PodView], node_gpus: set[str], devices: list[str]) -> Grant | None:
    """The acknowledged grant that was given exactly these devices, when the checkpoint
    lost it (a rebuilt node disk): the pod's annotation is the durable record.

    Exact set equality, and only when one pod matches: kubelet re-Allocates a running
    container with the device ids it checkpointed, so the same set is the same pod; a
    mere overlap could be another pod's slots and is refused instead.
    """
    want = set(devices)
    found = [
        g for g in grants_of(pods, node_gpus) if g.pod.active and want and want == set(g.allocated)
    ]
    return found[0] if len(found) == 1 else None


class DevicePluginService(pb_grpc.DevicePluginServicer):
    """kubelet's view of headroom on one node."""

    def __init__(
        self,
        devices: DeviceState,
        pods: PodSource,
        checkpoint: Checkpoint,
        stop: threading.Event | None = None,
        watch_interval_s: float = 1.0,
    ) -> None:
        self.devices = devices
        self.pods = pods
        self.checkpoint = checkpoint
        self.stop = stop or threading.Event()
        self.watch_interval_s = watch_interval_s
        # one Allocate at a time: two concurrent calls must not both take one grant
        self._allocate_lock = threading.Lock()

    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return pb.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[Any]:
        version, slots = self.devices.snapshot()
        yield _list(slots)
        while context.is_active() and not self.stop.is_set():
            newer, slots = self.devices.wait_change(version, self.watch_interval_s)
            if newer != version:
                version = newer
                yield _list(slots)

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        out = pb.PreferredAllocationResponse()
        try:
            grants = grants_of(self.pods.pods(), self.devices.gpus())
        except Exception as e:  # advisory call: an API hiccup leaves the choice to kubelet
            log.warning("GetPreferredAllocation: cannot list pods (%s); no preference", e)
            grants = []
        for req in request.container_requests:
            ids = preferred(
                grants,
                list(req.available_deviceIDs),
                list(req.must_include_deviceIDs),
                req.allocation_size,
            )
            log.info("GetPreferredAllocation size=%d -> %s", req.allocation_size, ids)
            out.container_responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return out

    def Allocate(self, request: Any, context: Any) -> Any:
        out = pb.AllocateResponse()
        with self._allocate_lock:
            for req in request.container_requests:
                try:
                    answer = self._allocate_one(list(req.devices_ids))
                except NoMatch as e:
                    log.warning("Allocate %s refused: %s", list(req.devices_ids), e)
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"headroom: {e}")
                except Exception as e:
                    log.exception("Allocate %s failed", list(req.devices_ids))
                    context.abort(grpc.StatusCode.UNAVAILABLE, f"headroom: {e}")
                out.container_responses.append(
                    pb.ContainerAllocateResponse(
                        envs=answer.envs,
                        cdi_devices=[pb.CDIDevice(name=n) for n in answer.cdi_devices],
                    )
                )
        return out

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        return pb.PreStartContainerResponse()

    def _allocate_one(self, devices: list[str]) -> Answer:
        pods = self.pods.pods()
        # a pod deleted, finished or rejected at admission releases its answers; one that
        # is terminating keeps them (kubelet may still re-Allocate it until it is gone)
        for gone in self.checkpoint.prune({p.uid for p in pods if not p.terminal}):
            log.info("released %s of pod %s (gone or finished)", list(gone.devices), gone.pod)
        cached = self.checkpoint.get(devices)
        if cached is not None:
            log.info("re-Allocate %s: same answer as before for %s", devices, cached.pod)
            return cached
        node_gpus = self.devices.gpus()
        grants = grants_of(pods, node_gpus)
        try:
            grant = match(grants, devices)
        except NoMatch:
            again = from_annotations(pods, node_gpus, devices)
            if again is None:
                raise
            answer = answer_for(again, devices)
            self.checkpoint.put(answer)
            log.info("re-Allocate %s: rebuilt from %s's acknowledgement", devices, again.pod.key)
            return answer
        answer = answer_for(grant, devices)
        self.checkpoint.put(answer)
        try:
            self.pods.annotate(grant.pod, ANN_ALLOCATED, acknowledged(grant, devices))
        except Exception:
            self.checkpoint.drop(answer.devices)
            raise
        log.info("Allocate %s -> %s: %s", devices, grant.pod.key, answer.envs)
        return answer


def _list(slots: list[Slot]) -> Any:
    return pb.ListAndWatchResponse(
        devices=[pb.Device(ID=s.id, health=HEALTHY if s.healthy else UNHEALTHY) for s in slots]
    )
