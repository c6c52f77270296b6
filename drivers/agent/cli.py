"""``headroom agent``: the DaemonSet entry point.

``extender/cli.py`` owns the top-level parser and calls ``add_agent_command`` to
register ``agent``; the registered ``func`` takes the parsed args and returns the exit
code. ``main`` exists so the agent also runs alone (``python -m drivers agent ...``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence

import msgspec

from drivers.agent.loop import Agent
from drivers.agent.metrics import AgentMetrics
from drivers.agent.sender import ReportSender
from drivers.agent.server import MetricsServer
from drivers.attribution.cgroup import ProcAttributor
from drivers.attribution.pods import Attributor, CachedAttributor
from drivers.gpu.base import GpuDriver
from drivers.podresources.client import KUBELET_POD_RESOURCES, PodResourcesClient
from extender.wire.clock import SystemClock
from extender.wire.logs import setup_logging
from extender.wire.tls import CertReloader

log = logging.getLogger("headroom.agent")

DEFAULT_INTERVAL_S = 5.0
DEFAULT_METRICS_PORT = 9402
DEFAULT_SIMULATED_GPUS = "4xA10G:24Gi"


def add_agent_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Register ``agent`` on an argparse subparsers object; sets ``func``."""
    p = subparsers.add_parser(
        "agent",
        help="run the node agent (NVML or simulated GPUs -> extender reports, /metrics)",
        description="Sample GPUs, attribute processes to pods, POST reports to the extender.",
    )
    p.add_argument("--driver", choices=("nvml", "simulated"), default="nvml")
    p.add_argument(
        "--simulated-gpus",
        default=DEFAULT_SIMULATED_GPUS,
        metavar="SPEC",
        help="simulated GPUs, COUNTxMODEL:MEMORY[,...] (default %(default)s)",
    )
    p.add_argument(
        "--node",
        default=os.environ.get("NODE_NAME"),
        help="this node's name (default: $NODE_NAME, from the downward API)",
    )
    p.add_argument(
        "--extender",
        metavar="URL[,URL...]",
        help="extender base URL(s), comma-separated; an http URL's DNS name is resolved on "
        "every send to all its A records and each gets the report (a headless Service "
        "reaches every replica), e.g. http://headroom-extender.headroom-system.svc:8888",
    )
    p.add_argument("--interval", type=_positive_float, default=DEFAULT_INTERVAL_S, metavar="S")
    p.add_argument("--once", action="store_true", help="print one report as JSON and exit")
    p.add_argument(
        "--token-file",
        metavar="F",
        help="bearer token file, re-read on every send (projected SA tokens rotate)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        metavar="P",
        help="port for /metrics and /healthz; 0 disables (default %(default)s)",
    )
    p.add_argument(
        "--metrics-tls-cert-file",
        metavar="F",
        help="serve /metrics over TLS with this certificate (reloaded on change)",
    )
    p.add_argument("--metrics-tls-key-file", metavar="F", help="key for --metrics-tls-cert-file")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated driver")
    p.add_argument(
        "--label",
        action="append",
        default=[],
        type=_label,
        metavar="KEY=VALUE",
        help="a node label to report (repeatable), e.g. node.kubernetes.io/instance-type="
        "g5.12xlarge: standalone there is no Node object to read it from (in a cluster the "
        "extender reads the Node's labels)",
    )
    p.add_argument(
        "--allocatable",
        action="append",
        default=[],
        type=_label,
        metavar="RESOURCE=QUANTITY",
        help="the node's allocatable CPU or memory (repeatable), e.g. cpu=64 memory=256Gi: "
        "standalone, the extender then refuses nodes whose CPU or memory a pod would not "
        "fit and counts GPUs stranded behind them (in a cluster it reads the Node's)",
    )
    p.add_argument(
        "--proc-root",
        default="/proc",
        help="host /proc (the agent needs hostPID: true; NVML returns host PIDs)",
    )
    p.add_argument(
        "--pod-resources-socket",
        default=KUBELET_POD_RESOURCES,
        metavar="PATH",
        help="kubelet's pod-resources socket: each report says which devices every pod "
        "holds (the truth the ledger bills); absent socket = not reported (logged once), "
        "'' turns it off (default %(default)s)",
    )
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=run_agent_command)
    return p


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def make_driver(args: argparse.Namespace) -> tuple[GpuDriver, Attributor]:
    """The driver and the matching attributor (the simulator maps its own PIDs)."""
    if args.driver == "simulated":
        from drivers.gpu.simulated import SimulatedDriver

        sim = SimulatedDriver(args.simulated_gpus, seed=args.seed, node=args.node)
        return sim, sim.attribute
    from drivers.gpu.nvml import NvmlDriver

    return NvmlDriver(), CachedAttributor(ProcAttributor(args.proc_root))


def run_agent_command(args: argparse.Namespace) -> int:
    """Entry for ``headroom agent``; returns the process exit code."""
    setup_logging(args.log_level)
    args.labels = dict(args.label)
    args.allocatable = dict(args.allocatable)
    if not args.node:
        print("headroom agent: --node or $NODE_NAME is required", file=sys.stderr)
        return 2
    if not args.once and not args.extender:
        print("headroom agent: --extender URL is required (or use --once)", file=sys.stderr)
        return 2
    if bool(args.metrics_tls_cert_file) != bool(args.metrics_tls_key_file):
        print(
            "headroom agent: --metrics-tls-cert-file and --metrics-tls-key-file go together",
            file=sys.stderr,
        )
        return 2
    try:
        driver, attribute = make_driver(args)
    except (RuntimeError, ValueError) as e:  # NvmlInitError, bad --simulated-gpus
        print(f"headroom agent: {e}", file=sys.stderr)
        return 1
    try:
        if args.once:
            return _once(driver, attribute, args)
        return _loop(driver, attribute, args)
    finally:
        driver.close()


def _once(driver: GpuDriver, attribute: Attributor, args: argparse.Namespace) -> int:
    socket = args.pod_resources_socket
    pod_resources = PodResourcesClient(socket) if socket else None
    agent = Agent(
        driver,
        args.node,
        attribute,
        SystemClock(),
        interval_s=args.interval,
        labels=args.labels,
        allocatable=args.allocatable,
        received=pod_resources.list if pod_resources else None,
    )
    try:
        report = agent.sample()
    finally:
        if pod_resources is not None:
            pod_resources.close()
    sys.stdout.buffer.write(msgspec.json.encode(report) + b"\n")
    sys.stdout.flush()
    return 0


def _loop(driver: GpuDriver, attribute: Attributor, args: argparse.Namespace) -> int:
    metrics = AgentMetrics()
    pod_resources = (
        PodResourcesClient(args.pod_resources_socket) if args.pod_resources_socket else None
    )
    sender = ReportSender(
        args.extender,
        args.token_file,
        metrics=metrics,
        timeout_s=min(5.0, args.interval),
    )
    agent = Agent(
        driver,
        args.node,
        attribute,
        SystemClock(),
        sender=sender,
        metrics=metrics,
        interval_s=args.interval,
        labels=args.labels,
        allocatable=args.allocatable,
        received=pod_resources.list if pod_resources else None,
    )
    server = None
    if args.metrics_port:
        tls = None
        if args.metrics_tls_cert_file:
            tls = CertReloader(args.metrics_tls_cert_file, args.metrics_tls_key_file)
        try:
            server = MetricsServer(metrics.registry, agent.healthy, args.metrics_port, tls=tls)
        except OSError as e:
            raise OSError(
                f"metrics port {args.metrics_port}: {e.strerror}"
                " (another agent on this machine? give each its own --metrics-port)"
            ) from None
        server.start()
    stop = threading.Event()
    _stop_on_signals(stop)
    log.info(
        "agent started",
        extra={
            "fields": {
                "node": args.node,
                "driver": driver.name,
                "extender": args.extender,
                "interval_s": args.interval,
                "metrics_port": server.port if server else None,
                "pod_resources_socket": args.pod_resources_socket or None,
            }
        },
    )
    try:
        agent.run(stop)
    finally:
        sender.close()
        if pod_resources is not None:
            pod_resources.close()
        if server is not None:
            server.stop()
    log.info("agent stopped")
    return 0


def _stop_on_signals(stop: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="headroom")
    add_agent_command(parser.add_subparsers(dest="command", required=True))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: a label is KEY=VALUE")
    return key, value
