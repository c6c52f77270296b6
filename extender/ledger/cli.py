"""``headroom ledger``: export, verify and chargeback from the command line.

``add_ledger_command(subparsers)`` registers the command on the CLI's argparse tree;
each subcommand sets ``func(args) -> int`` (the exit status). Exit codes: 0 ok,
1 verification failed, 2 bad input or ledger unreachable.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from extender.core.allocation import Allocation, LedgerUnavailable
from extender.core.received import Receipt
from extender.core.table import align
from extender.ledger import chargeback_report, is_dsn, open_ledger
from extender.ledger.base import Ledger
from extender.ledger.chargeback import ChargebackReport, parse_group_by, shown
from extender.ledger.charges import allocation_charge, allocation_seconds, billed, cents
from extender.ledger.dialect import NullHooks
from extender.ledger.exports import report_csv, report_dict
from extender.ledger.window import month_start, parse_timestamp
from extender.wire.clock import SystemClock

DEFAULT_DB = "headroom.db"


def add_ledger_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``ledger`` (export | verify | chargeback) on an argparse subparsers object."""
    ledger = subparsers.add_parser("ledger", help="inspect the allocation ledger")
    sub = ledger.add_subparsers(dest="ledger_command", required=True, metavar="SUBCOMMAND")

    export = sub.add_parser("export", help="allocations (or grouped charges) of a window")
    _common(export, window=True)
    export.add_argument("--format", choices=("csv", "json"), default="csv")
    export.add_argument(
        "--group-by",
        type=_group_by,
        default=None,
        help="namespace|node|capacity-type|pod|label:KEY (default: per row)",
    )
    export.set_defaults(func=cmd_export)

    verify = sub.add_parser("verify", help="walk the event hash chain")
    _common(verify, window=False)
    verify.set_defaults(func=cmd_verify)

    charge = sub.add_parser("chargeback", help="charges, node cost and idle, as a table")
    _common(charge, window=True)
    charge.add_argument(
        "--group-by",
        type=_group_by,
        default="namespace",
        help="namespace|node|capacity-type|pod|label:KEY",
    )
    charge.set_defaults(func=cmd_chargeback)
    return ledger


def _common(p: argparse.ArgumentParser, window: bool) -> None:
    p.add_argument(
        "--db", default=DEFAULT_DB, help=f"SQLite path or postgresql:// DSN (default {DEFAULT_DB})"
    )
    if window:
        p.add_argument(
            "--from",
            dest="start",
            type=_when,
            default=None,
            help="a date (2026-01-01: UTC midnight), RFC3339 with a zone, or unix seconds "
            "(default: start of this month, UTC)",
        )
        p.add_argument(
            "--to",
            dest="end",
            type=_when,
            default=None,
            help="a date (2026-01-01: UTC midnight), RFC3339 with a zone, or unix seconds "
            "(default: now)",
        )


def _when(value: str) -> float:
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _group_by(value: str) -> str:
    try:
        return parse_group_by(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _open(db: str) -> Ledger:
    if not is_dsn(db) and not os.path.exists(db):
        raise LedgerUnavailable(f"no ledger at {db!r}")
    return open_ledger(db, SystemClock(), hooks=NullHooks())


def _window(args: argparse.Namespace, now: float) -> tuple[float, float]:
    end = args.end if args.end is not None else now
    start = args.start if args.start is not None else month_start(end)
    if end <= start:
        raise ValueError("--to must be after --from")
    return start, end


def _run(args: argparse.Namespace, body: Any) -> int:
    """Open the ledger, run ``body(ledger)``, close; map failures to exit 2."""
    try:
        ledger = _open(args.db)
    except LedgerUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return int(body(ledger))
    except (LedgerUnavailable, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        ledger.close()


def cmd_verify(args: argparse.Namespace) -> int:
    def body(ledger: Ledger) -> int:
        report = ledger.verify_chain()
        if report.ok:
            print(f"ok: {report.events} events verified")
            return 0
        if report.first_bad_seq is None:  # the chain holds; a billed row does not
            print(f"FAILED: {report.reason} ({report.events} events verified)", file=sys.stderr)
            return 1
        print(
            f"FAILED at event {report.first_bad_seq}: {report.reason} "
            f"({report.events} events verified before it)",
            file=sys.stderr,
        )
        return 1

    return _run(args, body)


def cmd_export(args: argparse.Namespace) -> int:
    def body(ledger: Ledger) -> int:
        now = SystemClock().now()
        start, end = _window(args, now)
        if args.group_by:
            report = chargeback_report(ledger, start, end, args.group_by, now)
            out = report_csv(report) if args.format == "csv" else _json(report_dict(report))
        else:
            got = {r.allocation_id: r for r in ledger.receipts(start, end)}
            rows = [
                _row_dict(r, start, end, now, got.get(r.id)) for r in ledger.charge_rows(start, end)
            ]
            out = _rows_csv(rows) if args.format == "csv" else _json(rows)
        sys.stdout.write(out)
        return 0

    return _run(args, body)


def cmd_chargeback(args: argparse.Namespace) -> int:
    def body(ledger: Ledger) -> int:
        now = SystemClock().now()
        start, end = _window(args, now)
        print(render_table(chargeback_report(ledger, start, end, args.group_by, now)))
        return 0

    return _run(args, body)


EXPORT_FIELDS = (
    "id",
    "pod_uid",
    "namespace",
    "pod_name",
    "node",
    "capacity_type",
    "gpu_uuid",
    "memory_mib",
    "price_per_hour",
    "decided_at",
    "ended_at",
    "status",
    "billed_seconds",
    "cost_usd",
    "received_gpu_uuid",  # what kubelet says the pod holds ("" until the agent says)
    "billed_memory_mib",
    "billed_price_per_hour",
)


def _row_dict(
    a: Allocation, start: float, end: float, now: float, receipt: Receipt | None
) -> dict[str, Any]:
    mib, price = billed(a, receipt)
    return {
        "id": a.id,
        "pod_uid": a.pod.uid,
        "namespace": a.pod.namespace,
        "pod_name": a.pod.name,
        "node": a.node.name,
        "capacity_type": a.node.capacity_type,
        "gpu_uuid": a.grant.gpu_uuid,
        "memory_mib": a.grant.memory_mib,
        "price_per_hour": shown(a.grant.price_per_hour),
        "decided_at": a.decided_at,
        "ended_at": a.ended_at,
        "status": a.status.value,
        "billed_seconds": str(allocation_seconds(a, start, end, now)),
        "cost_usd": shown(_cents(allocation_charge(a, start, end, now, receipt))),
        "received_gpu_uuid": receipt.gpu_uuid if receipt else "",
        "billed_memory_mib": mib,
        "billed_price_per_hour": shown(price),
    }


def _rows_csv(rows: Sequence[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, EXPORT_FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def _json(obj: object) -> str:
    return json.dumps(obj, indent=2) + "\n"


def render_table(report: ChargebackReport) -> str:
    """Aligned text: one line per group, totals, then node cost / charged / idle."""
    head = [
        report.group_by.upper(),
        "ALLOCS",
        "GIB-HOURS",
        "COST USD",
        "MEAN USED MIB",
        "MEAN SM %",
    ]
    lines = [
        [
            g.key,
            str(g.allocations),
            str(g.gib_hours),
            shown(g.cost),
            _num(g.mean_used_mib),
            _num(g.mean_sm_util),
        ]
        for g in report.groups
    ]
    lines.append(
        [
            "TOTAL charged",
            str(sum(g.allocations for g in report.groups)),
            str(sum((g.gib_hours for g in report.groups), Decimal(0))),
            str(report.total_charged),
            "",
            "",
        ]
    )
    out = [align([head, *lines], right_from=1)]
    nodes = [
        [
            n.node,
            n.capacity_type,
            str(n.gpu_hours),
            shown(n.cost),
            str(n.charged),
            shown(n.idle),
            _flags(n.oversubscribed, n.unpriced),
        ]
        for n in report.nodes
    ]
    nodes.append(
        [
            "TOTAL",
            "",
            "",
            str(report.total_node_cost),
            str(report.total_charged),
            str(report.total_idle),
            "",
        ]
    )
    out.append(
        align(
            [["NODE", "CAPACITY", "GPU-HOURS", "NODE COST", "CHARGED", "IDLE", "FLAGS"], *nodes],
            right_from=2,
        )
    )
    if report.unpriced_nodes:
        out.append(
            f"unpriced: {len(report.unpriced_nodes)} node(s) without a price, left out of the"
            f" totals; {report.unpriced_gib_hours} GiB-hours granted on them (give their"
            " instance type or GPU model a price with --price-file)"
        )
    out.append(f"rounding: {report.rounding}")
    return "\n\n".join(out)


def _cents(amount: Decimal | None) -> Decimal | None:
    return None if amount is None else cents(amount)


def _flags(oversubscribed: bool, unpriced: bool) -> str:
    return ",".join(
        f for f, on in (("OVERSUBSCRIBED", oversubscribed), ("UNPRICED", unpriced)) if on
    )


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"
