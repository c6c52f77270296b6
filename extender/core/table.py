"""Aligned plain-text tables for the CLI (simulate, ledger chargeback)."""

from __future__ import annotations

from collections.abc import Sequence


def align(rows: Sequence[Sequence[str]], right_from: int = 1, rule: bool = False) -> str:
    """Columns padded to their widest cell; columns from ``right_from`` on are right-aligned
    (numbers). ``rule`` draws a dashed line under the first row (the header)."""
    table = [list(r) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    if rule:
        table.insert(1, ["-" * w for w in widths])
    return "\n".join(
        "  ".join(
            c.rjust(w) if i >= right_from else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in table
    )
