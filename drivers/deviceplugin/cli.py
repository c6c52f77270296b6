"""``headroom device-plugin``: the command, registered on the CLI like ``headroom agent``.

``extender/cli.py`` owns the top-level parser and calls ``add_device_plugin_command``;
the registered ``func`` takes the parsed args and returns the exit code.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from drivers.gpu.base import GpuDriver
from extender.wire.logs import setup_logging

log = logging.getLogger("headroom.deviceplugin")

DEFAULT_KUBELET_DIR = "/var/lib/kubelet"
DEFAULT_RESOURCE = "nvidia.com/gpu"
DEFAULT_SLOTS = 4
DEFAULT_SIMULATED_GPUS = "4xA10G:24Gi"


def add_device_plugin_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Register ``device-plugin`` on an argparse subparsers object; sets ``func``."""
    p = subparsers.add_parser(
        "device-plugin",
        help="run the kubelet device plugin that gives each pod exactly its granted GPUs",
        description="Advertise each GPU as slots <GPU-UUID>::<k> to kubelet, steer kubelet to "
        "the GPUs the extender granted, and refuse any other allocation.",
    )
    p.add_argument(
        "--node",
        default=os.environ.get("NODE_NAME"),
        help="this node's name (default: $NODE_NAME, from the downward API)",
    )
    p.add_argument("--driver", choices=("nvml", "simulated"), default="nvml")
    p.add_argument(
        "--simulated-gpus",
        default=DEFAULT_SIMULATED_GPUS,
        metavar="SPEC",
        help="simulated GPUs, COUNTxMODEL:MEMORY[,...] (default %(default)s)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the simulated driver (same as the agent's)"
    )
    p.add_argument(
        "--slots-per-gpu",
        type=int,
        default=DEFAULT_SLOTS,
        metavar="N",
        help="devices advertised per GPU: how many pods may share one (default %(default)s)",
    )
    p.add_argument(
        "--kubelet-dir",
        default=DEFAULT_KUBELET_DIR,
        metavar="DIR",
        help="kubelet's root; sockets live in DIR/device-plugins (default %(default)s)",
    )
    p.add_argument(
        "--resource",
        default=DEFAULT_RESOURCE,
        help="extended resource to register (default %(default)s)",
    )
    p.add_argument(
        "--health-interval",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between GPU health samples (default %(default)s)",
    )
    p.add_argument("--kubeconfig", help="read and annotate pods through this kubeconfig")
    p.add_argument(
        "--in-cluster", action="store_true", help="use the pod's ServiceAccount to reach the API"
    )
    p.add_argument("--log-level", default="info", help="debug, info, warning, error")
    p.set_defaults(func=run)
    return p


def _driver(args: argparse.Namespace) -> GpuDriver:
    if args.driver == "simulated":
        from drivers.gpu.simulated import SimulatedDriver

        return SimulatedDriver(args.simulated_gpus, seed=args.seed, node=args.node)
    from drivers.gpu.nvml import NvmlDriver

    return NvmlDriver()


def _core_api(args: argparse.Namespace) -> Any:
    from kubernetes import client, config

    if args.in_cluster:
        config.load_incluster_config()
        return client.CoreV1Api()
    return client.CoreV1Api(config.new_client_from_config(config_file=args.kubeconfig))


def run(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT; 2 on a usage error."""
    setup_logging(args.log_level)
    problems = []
    if not args.node:
        problems.append("--node (or $NODE_NAME) is required")
    if bool(args.kubeconfig) == bool(args.in_cluster):
        problems.append("give exactly one of --kubeconfig F or --in-cluster")
    if args.slots_per_gpu < 1:
        problems.append("--slots-per-gpu must be at least 1")
    if problems:
        print("headroom device-plugin: " + "; ".join(problems), file=sys.stderr)
        return 2
    # imported here, not at the top: grpc and the stubs cost every other command's start
    from drivers.deviceplugin.checkpoint import Checkpoint
    from drivers.deviceplugin.devices import DeviceState
    from drivers.deviceplugin.kubelet import PluginRunner, endpoint_name
    from drivers.deviceplugin.pods import KubePods
    from drivers.deviceplugin.service import DevicePluginService

    socket_dir = Path(args.kubelet_dir) / "device-plugins"
    state_file = endpoint_name(args.resource).replace(".sock", ".checkpoint.json")
    driver = _driver(args)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        devices = DeviceState(driver, args.slots_per_gpu)
        checkpoint = Checkpoint(socket_dir / state_file)
        pods = KubePods(_core_api(args), args.node, args.resource)
        service = DevicePluginService(devices, pods, checkpoint, stop=stop)
        poller = threading.Thread(
            target=devices.poll_forever, args=(args.health_interval, stop), daemon=True
        )
        poller.start()
        log.info(
            "device plugin for node %s: %s, %d slots per GPU, %s",
            args.node,
            args.resource,
            args.slots_per_gpu,
            socket_dir,
        )
        PluginRunner(service, socket_dir, args.resource).run(stop)
    finally:
        driver.close()
    return 0
