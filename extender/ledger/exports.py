"""The chargeback report as JSON and CSV, for the audit API and ``headroom ledger export``.

Money leaves as decimal strings, never floats, so no consumer can turn a cent into
0.009999.
"""

from __future__ import annotations

import csv
import io
from decimal import Decimal

from extender.ledger.chargeback import ChargebackReport, shown


def report_dict(report: ChargebackReport) -> dict[str, object]:
    """JSON-ready form; money as strings so no consumer turns it back into floats."""
    return {
        "from": report.start,
        "to": report.end,
        "group_by": report.group_by,
        "rounding": report.rounding,
        "groups": [
            {
                "key": g.key,
                "allocations": g.allocations,
                "gib_hours": str(g.gib_hours),
                "cost": _money(g.cost),
                "mean_used_mib": g.mean_used_mib,
                "mean_sm_util": g.mean_sm_util,
                "unpriced_gib_hours": str(g.unpriced_gib_hours),
            }
            for g in report.groups
        ],
        "nodes": [
            {
                "node": n.node,
                "instance_type": n.instance_type,
                "capacity_type": n.capacity_type,
                "gpu_hours": str(n.gpu_hours),
                "cost": _money(n.cost),
                "charged": str(n.charged),
                "idle": _money(n.idle),
                "oversubscribed": n.oversubscribed,
                "unpriced": n.unpriced,
            }
            for n in report.nodes
        ],
        "total_charged": str(report.total_charged),
        "total_node_cost": str(report.total_node_cost),
        "total_idle": str(report.total_idle),
        "oversubscribed_nodes": list(report.oversubscribed),
        "unpriced_nodes": list(report.unpriced_nodes),
        "unpriced_gib_hours": str(report.unpriced_gib_hours),
    }


def report_csv(report: ChargebackReport) -> str:
    """One row per group with a header row; utilisation blank where never observed."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            report.group_by,
            "allocations",
            "gib_hours",
            "cost_usd",
            "mean_used_mib",
            "mean_sm_util",
            "unpriced_gib_hours",
        ]
    )
    for g in report.groups:
        w.writerow(
            [
                g.key,
                g.allocations,
                g.gib_hours,
                shown(g.cost),
                _fmt(g.mean_used_mib),
                _fmt(g.mean_sm_util),
                g.unpriced_gib_hours,
            ]
        )
    return buf.getvalue()


def _money(v: Decimal | None) -> str | None:
    """JSON money: a decimal string, or null when the amount is unknown (never "0")."""
    return None if v is None else str(v)


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.1f}"
