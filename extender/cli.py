"""``headroom`` command line: serve, simulate, agent, ledger, claim, top, device-plugin."""

from __future__ import annotations

import argparse
import ssl
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from extender import __version__
from extender.core.allocation import LedgerUnavailable
from extender.scoring import POLICIES


def _serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the scheduler extender (standalone by default)")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 8888)")
    p.add_argument("--db", help="ledger: SQLite path or postgresql:// DSN (default headroom.db)")
    p.add_argument(
        "--ledger-timeout",
        type=float,
        help="bound on each ledger wait: connect, statement, lock, SQLite busy (3 s; keep it "
        "below kube-scheduler's extender httpTimeout)",
    )
    p.add_argument(
        "--bind-wait", type=float, help="how long a retried bind waits for the first (4 s)"
    )
    p.add_argument("--policy", choices=sorted(POLICIES), help="placement policy (default headroom)")
    p.add_argument("--cost-weight", type=float, help="weight of the cost term (default 1)")
    p.add_argument("--stale-after", type=float, help="seconds before a report is stale (30)")
    p.add_argument(
        "--ack-timeout",
        type=float,
        help="seconds a grant on a device-plugin node waits for the plugin's ack (60)",
    )
    p.add_argument("--margin-mib", type=int, help="safety margin kept free per GPU (512)")
    p.add_argument("--price-file", help="JSON/YAML price overrides (instance types, spot)")
    p.add_argument(
        "--agent-token-file",
        help="file holding the shared bearer token for "
        "reports and release (re-read when it changes)",
    )
    p.add_argument(
        "--agent-token-audience",
        help="accept agents' projected ServiceAccount tokens of this audience, "
        "checked with a TokenReview (needs --kubeconfig or --in-cluster)",
    )
    p.add_argument(
        "--agent-service-account",
        help="the agents' ServiceAccount, namespace:name (default headroom-system:headroom-agent)",
    )
    p.add_argument("--audit-token-file", help="require this bearer token on the /v1 audit API")
    p.add_argument(
        "--max-nodes-per-request",
        type=int,
        help="refuse filter/prioritize/preempt bodies with more nodes (50000)",
    )
    p.add_argument(
        "--tls-port",
        type=int,
        help="also serve the API and the admission webhook over TLS on this port (manifests: 8443)",
    )
    p.add_argument("--tls-cert-file", help="TLS certificate chain (PEM), reloaded on change")
    p.add_argument("--tls-key-file", help="TLS private key (PEM), reloaded on change")
    p.add_argument(
        "--allow-unauthenticated-reports",
        action="store_true",
        default=None,
        help="accept agent reports without a token (development only)",
    )
    p.add_argument(
        "--kubeconfig",
        help="watch and bind through this cluster's API (default: standalone, in-process binder)",
    )
    p.add_argument(
        "--in-cluster",
        action="store_true",
        default=None,
        help="use the pod's ServiceAccount to reach the cluster",
    )
    p.add_argument(
        "--webhook-mode",
        choices=("deny", "warn"),
        help="admission guardrail: deny pods that see GPUs they were not given, "
        "or only warn (default deny)",
    )
    p.add_argument("--webhook-exempt-namespaces", help="comma-separated (default kube-system)")
    _edge_flags(p)
    p.add_argument("--log-level", help="debug, info, warning, error")
    p.set_defaults(func=_serve)


def _edge_flags(p: argparse.ArgumentParser) -> None:
    """Limits at the HTTP edge (docs/reliability.md); defaults in extender/settings.py."""
    p.add_argument(
        "--scheduler-verbs",
        choices=("loopback", "any"),
        help="who may call filter/prioritize/bind/preempt without the shared token "
        "(default loopback: the kube-scheduler beside the extender)",
    )
    p.add_argument("--max-body-bytes", type=int, help="filter/prioritize body limit (64 MiB)")
    p.add_argument("--max-bind-body-bytes", type=int, help="bind body limit (64 KiB)")
    p.add_argument("--max-preempt-body-bytes", type=int, help="preempt body limit (32 MiB)")
    p.add_argument(
        "--body-budget-bytes",
        type=int,
        help="memory for request bodies over 64 KiB in flight, each counted twice "
        "(256 MiB); beyond it: 503",
    )
    p.add_argument("--max-connections", type=int, help="open connections (0: automatic)")
    p.add_argument(
        "--idle-timeout", dest="idle_timeout_s", type=float, help="idle connection (5 s)"
    )
    p.add_argument(
        "--header-timeout", dest="header_timeout_s", type=float, help="request headers (10 s)"
    )
    p.add_argument("--body-timeout", dest="body_timeout_s", type=float, help="request body (30 s)")


def _serve(args: argparse.Namespace) -> int:
    from extender.core.runtime import run_event_loop
    from extender.settings import Settings
    from extender.wire.logs import setup_logging
    from extender.wiring import build, serve

    overrides = {k: v for k, v in vars(args).items() if v is not None and k not in ("func", "cmd")}
    settings = Settings(**overrides)
    setup_logging(settings.log_level)
    built = build(settings)
    run_event_loop(serve(built, settings))
    return 0


def _simulate_parser(sub: argparse._SubParsersAction) -> None:
    from extender.simulate import flags

    p = sub.add_parser(
        "simulate",
        help="place a synthetic GPU workload on a simulated "
        "Karpenter cluster through a real extender over HTTP",
        description="Schedule a seeded GPU workload on a simulated Karpenter cluster through "
        "a real extender over HTTP, once per policy, and compare the policies: placement, "
        "fragmentation, cost, and each run's chargeback from its own ledger. Progress goes "
        "to stderr: a bar on a terminal, else one line per policy.",
    )
    p.add_argument(
        "--nodes", type=flags.positive_int, default=40, help="simulated GPU nodes (default 40)"
    )
    p.add_argument(
        "--pods", type=flags.positive_int, default=600, help="pods that arrive (default 600)"
    )
    p.add_argument(
        "--policy",
        type=flags.policies,
        default=flags.DEFAULT_POLICIES,
        help=f"policy or comma-separated policies to compare, from {', '.join(sorted(POLICIES))} "
        f"(default {flags.DEFAULT_POLICIES})",
    )
    p.add_argument(
        "--cost-weight",
        type=flags.cost_weight,
        default=1.0,
        help="weight of the cost term against the policy's score (default 1)",
    )
    p.add_argument(
        "--seed", type=flags.seed, default=7, help="seed of the cluster and workload (default 7)"
    )
    p.add_argument(
        "--db",
        type=flags.new_file,
        metavar="PATH",
        help="keep the runs' SQLite ledgers: PATH itself for one policy; for several, one "
        "per policy beside it (sim.db -> sim-binpack.db, sim-fgd.db, ...), each file named "
        "on stderr; refuses a file that exists (default: throwaway ledgers)",
    )
    p.add_argument(
        "--plot", type=flags.new_file, metavar="PNG", help="write a PNG comparing the policies"
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument(
        "--jobs",
        type=flags.positive_int,
        help="policies run at once, each in its own process (default: the CPU count); "
        "the numbers do not depend on it",
    )
    p.set_defaults(func=_simulate)


def _simulate(args: argparse.Namespace) -> int:
    from extender.simulate import SimulationFailed
    from extender.simulate.run import main as simulate_main

    try:
        return simulate_main(args)
    except SimulationFailed as e:
        print(f"headroom simulate: {one_line(e)}", file=sys.stderr)
        return 1


class _Parser(argparse.ArgumentParser):
    """A wrong flag is one line that names it and says what to fix; the synopsis argparse
    prints first (several wrapped lines for ``serve``) is what ``--help`` is for."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="headroom", description=__doc__)
    parser.add_argument("--version", action="version", version=f"headroom {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    _serve_parser(sub)
    _simulate_parser(sub)
    for register in _optional_commands():
        register(sub)
    return parser


def _optional_commands() -> list[Callable[[Any], object]]:
    from drivers.agent.cli import add_agent_command
    from drivers.deviceplugin.cli import add_device_plugin_command
    from extender.dra.cli import add_claim_command
    from extender.http.top import add_top_command
    from extender.ledger.cli import add_ledger_command

    commands: list[Callable[[Any], object]] = [add_agent_command, add_ledger_command]
    commands += [add_claim_command, add_top_command, add_device_plugin_command]
    return commands


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. A user's mistake (a bad value, a file that cannot be read, a
    ledger that cannot be opened) is one line on stderr and exit 2, never a traceback."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError, LedgerUnavailable) as e:
        print(f"headroom {args.cmd}: {one_line(e, _flags_of(parser, args.cmd))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def one_line(e: BaseException, flags: dict[str, str] | None = None) -> str:
    """``e`` as one line: an OS error as ``path: reason`` (not ``[Errno 2] ...``), a
    settings error as the flag (or HEADROOM_ variable) and what it must be, and a
    driver's multi-line message (libpq's hints) folded onto one line."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.filename}: {e.strerror}"
    if isinstance(e, ssl.SSLError):  # "[SSL] PEM lib (_ssl.c:3905)" names no file
        return f"TLS: {e.reason or e}: check --tls-cert-file and --tls-key-file (PEM)"
    problems = _setting_problems(e, flags or {})
    if problems:
        return "; ".join(problems)
    return " ".join(str(e).split()) or type(e).__name__


def _setting_problems(e: BaseException, flags: dict[str, str]) -> list[str]:
    """pydantic's ValidationError from ``Settings``, one ``--flag: must ...`` each."""
    errors = getattr(e, "errors", None)
    if not callable(errors) or type(e).__name__ != "ValidationError":
        return []
    out = []
    for err in errors(include_url=False):
        name = str(err["loc"][0]) if err.get("loc") else "settings"
        where = f"{flags.get(name, '--' + name.replace('_', '-'))} (or HEADROOM_{name.upper()})"
        out.append(f"{where}: {str(err['msg']).lower()}, not {str(err.get('input'))[:40]!r}")
    return out


def _flags_of(parser: argparse.ArgumentParser, cmd: str) -> dict[str, str]:
    """Each of the command's settings (its argparse dest) -> the flag that sets it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and cmd in action.choices:
            sub = action.choices[cmd]
            return {a.dest: a.option_strings[-1] for a in sub._actions if a.option_strings}
    return {}


if __name__ == "__main__":
    sys.exit(main())
