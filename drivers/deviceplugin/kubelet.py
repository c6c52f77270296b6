"""Serving the plugin socket and registering with kubelet, again after every kubelet restart.

Why watch the files: a restarting kubelet removes every socket in its device-plugins
directory (ours included) and creates a new ``kubelet.sock``; it never calls plugins
back. A plugin that does not notice stays unregistered and the node's allocatable drops
to zero. So the runner checks once a second that its own socket still exists and that
``kubelet.sock`` is the same file (inode, ctime) it registered with, and otherwise starts a fresh
server and registers again.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from pathlib import Path

import grpc

from drivers.deviceplugin.api import api_pb2 as pb
from drivers.deviceplugin.api import api_pb2_grpc as pb_grpc
from drivers.deviceplugin.service import DevicePluginService

log = logging.getLogger("headroom.deviceplugin")

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"


def endpoint_name(resource: str) -> str:
    """Our socket's name for a resource: ``nvidia.com/gpu`` -> ``headroom-nvidia.com-gpu.sock``."""
    return "headroom-" + resource.replace("/", "-") + ".sock"


def register(kubelet_sock: Path, endpoint: str, resource: str, timeout_s: float = 5.0) -> None:
    """One ``Registration.Register`` call; raises ``grpc.RpcError`` when kubelet refuses."""
    with grpc.insecure_channel(f"unix://{kubelet_sock}") as ch:
        grpc.channel_ready_future(ch).result(timeout=timeout_s)
        pb_grpc.RegistrationStub(ch).Register(
            pb.RegisterRequest(
                version=API_VERSION,
                endpoint=endpoint,
                resource_name=resource,
                options=pb.DevicePluginOptions(get_preferred_allocation_available=True),
            ),
            timeout=timeout_s,
        )


def _identity(path: Path) -> tuple[int, int] | None:
    """Which file ``path`` is: inode and change time (an inode number alone can be
    reused by the next socket kubelet creates)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_ctime_ns)


class PluginRunner:
    """Keeps one registered plugin server alive in ``socket_dir`` until ``stop``."""

    def __init__(
        self,
        service: DevicePluginService,
        socket_dir: Path,
        resource: str,
        check_interval_s: float = 1.0,
    ) -> None:
        self.service = service
        self.socket_dir = socket_dir
        self.resource = resource
        self.check_interval_s = check_interval_s
        self.endpoint = endpoint_name(resource)
        self.socket = socket_dir / self.endpoint
        self.kubelet_sock = socket_dir / KUBELET_SOCKET
        self.registrations = 0  # how many times kubelet accepted us (tests read it)
        self.registered = threading.Event()
        self._server: grpc.Server | None = None
        self._registered_id: tuple[int, int] | None = None

    def _start_server(self) -> None:
        self._stop_server()
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if self.socket.exists() or self.socket.is_symlink():
            self.socket.unlink()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_DevicePluginServicer_to_server(self.service, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        log.info("serving %s on %s", self.resource, self.socket)

    def _stop_server(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0.5).wait(2)
            self._server = None

    def step(self) -> None:
        """One check: (re)serve and (re)register when kubelet or our socket changed."""
        kubelet_id = _identity(self.kubelet_sock)
        if kubelet_id is None:
            if self.registered.is_set():
                log.warning("%s is gone (kubelet stopped); waiting for it", self.kubelet_sock)
            self.registered.clear()
            self._registered_id = None
            return
        if (
            self._server is not None
            and self.registered.is_set()
            and kubelet_id == self._registered_id
            and self.socket.exists()
        ):
            return
        if self._server is None or not self.socket.exists():
            self._start_server()
        try:
            register(self.kubelet_sock, self.endpoint, self.resource)
        except (grpc.RpcError, grpc.FutureTimeoutError) as e:
            log.warning("registering %s with kubelet failed (%s); retrying", self.resource, e)
            self.registered.clear()
            return
        self._registered_id = kubelet_id
        self.registrations += 1
        self.registered.set()
        log.info("registered %s with kubelet (%s)", self.resource, self.kubelet_sock)

    def run(self, stop: threading.Event) -> None:
        """Check every ``check_interval_s`` until ``stop``; the server stops with it."""
        try:
            while not stop.is_set():
                try:
                    self.step()
                except Exception:
                    log.exception("device plugin runner step failed; retrying")
                stop.wait(self.check_interval_s)
        finally:
            self.service.stop.set()
            self._stop_server()
            if self.socket.exists():
                self.socket.unlink()
