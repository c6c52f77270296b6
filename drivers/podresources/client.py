"""Reading kubelet's pod-resources API v1: what each container on the node holds.

Why: the device plugin (ours or NVIDIA's) and kubelet decide which device a container
gets; the ledger only knows what the extender granted. kubelet's pod-resources socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``) is the node's own record of what it
handed out, the same one dcgm-exporter reads: ``List`` for every pod, ``Get`` for one,
both with the device plugin ids (``devices``) and the DRA devices
(``dynamic_resources``) per container.

The socket is optional: a node without it (or an agent without the hostPath) reports
nothing received, which the extender reads as "not judged", never as "holds nothing".
An absent socket is logged once; a failing call (kubelet restarting, or a socket the
agent may not connect to: kubelet makes it root-only) is logged once per streak of
failures, and retried on every sample.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path

import grpc

from drivers.podresources.api import api_pb2 as pb
from drivers.podresources.api import api_pb2_grpc as pb_grpc
from extender.wire.report import (
    MAX_CONTAINERS,
    MAX_DEVICE_IDS,
    MAX_PODS,
    MAX_STRING,
    ClaimDevice,
    ContainerReceived,
    DeviceIds,
    PodReceived,
)

log = logging.getLogger("headroom.agent.podresources")

KUBELET_POD_RESOURCES = "/var/lib/kubelet/pod-resources/kubelet.sock"
CALL_TIMEOUT_S = 5.0
# kubelet's pod-resources server sends up to 16 MiB (its default max message size)
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def received_pods(resources: Iterable[pb.PodResources]) -> list[PodReceived]:
    """kubelet's ``PodResources`` as the report carries them: only pods that hold a
    device or a DRA device, clipped to the report's bounds. Pure."""
    out: list[PodReceived] = []
    for pod in resources:
        held = (_container(c) for c in pod.containers)
        containers = [c for c in held if c is not None][:MAX_CONTAINERS]
        if containers:
            out.append(PodReceived(_clip(pod.namespace), _clip(pod.name), containers))
        if len(out) >= MAX_PODS:
            break
    return out


def _container(c: pb.ContainerResources) -> ContainerReceived | None:
    devices = [
        DeviceIds(_clip(d.resource_name), [_clip(i) for i in d.device_ids[:MAX_DEVICE_IDS]])
        for d in c.devices[:MAX_DEVICE_IDS]
        if d.device_ids
    ]
    claims = [
        ClaimDevice(
            _clip(r.claim_namespace),
            _clip(r.claim_name),
            _clip(cr.driver_name),
            _clip(cr.pool_name),
            _clip(cr.device_name),
            _clip(cr.share_id) if cr.HasField("share_id") else None,
        )
        for r in c.dynamic_resources
        for cr in r.claim_resources
        if cr.device_name
    ][:MAX_DEVICE_IDS]
    if not devices and not claims:
        return None
    return ContainerReceived(_clip(c.name), devices, claims)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_STRING else text[: MAX_STRING - 3] + "..."


class PodResourcesClient:
    """One channel to kubelet's pod-resources socket, opened when the socket exists."""

    def __init__(self, socket: str | Path = KUBELET_POD_RESOURCES) -> None:
        self.socket = Path(socket)
        self._channel: grpc.Channel | None = None
        self._stub: pb_grpc.PodResourcesListerStub | None = None
        self._said_absent = False
        self._failing = False
        self._lock = threading.Lock()

    def list(self) -> list[PodReceived] | None:
        """Every pod holding devices, or None when kubelet could not be asked (no
        socket, or the call failed): the report then says nothing was judged."""
        stub = self._connect()
        if stub is None:
            return None
        try:
            reply = stub.List(pb.ListPodResourcesRequest(), timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            if not self._failing:
                log.warning(
                    "kubelet pod-resources List failed; reports carry no received devices"
                    " until it answers",
                    extra={"fields": {"socket": str(self.socket), "code": str(exc.code())}},
                )
            self._failing = True
            self.close()  # a restarted kubelet has a new socket: dial it afresh next time
            return None
        if self._failing:
            self._failing = False
            log.info(
                "kubelet pod-resources answers again",
                extra={"fields": {"socket": str(self.socket)}},
            )
        return received_pods(reply.pod_resources)

    def get(self, namespace: str, name: str) -> PodReceived | None:
        """One pod (kubelet's ``Get``); None when it holds no device or cannot be read."""
        stub = self._connect()
        if stub is None:
            return None
        try:
            reply = stub.Get(
                pb.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace),
                timeout=CALL_TIMEOUT_S,
            )
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                log.warning(
                    "kubelet pod-resources Get failed",
                    extra={"fields": {"pod": f"{namespace}/{name}", "code": str(exc.code())}},
                )
            return None
        found = received_pods([reply.pod_resources])
        return found[0] if found else None

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel, self._stub = None, None

    def _connect(self) -> pb_grpc.PodResourcesListerStub | None:
        with self._lock:
            if self._stub is not None:
                return self._stub
            if not self.socket.is_socket():
                if not self._said_absent:
                    self._said_absent = True
                    log.info(
                        "no kubelet pod-resources socket: received devices are not reported",
                        extra={"fields": {"socket": str(self.socket)}},
                    )
                return None
            self._said_absent = False
            self._channel = grpc.insecure_channel(
                f"unix://{self.socket}",
                options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
            )
            self._stub = pb_grpc.PodResourcesListerStub(self._channel)
            return self._stub


__all__ = ["KUBELET_POD_RESOURCES", "PodResourcesClient", "received_pods"]
