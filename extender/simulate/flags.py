"""``headroom simulate``'s flags: what each accepts, and the ledger files ``--db`` names.

Checked when argparse reads them, so a wrong value is one ``usage`` line and exit 2
before anything runs, not a run of zeros or a traceback a minute later.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from extender.ledger import is_dsn
from extender.scoring import POLICIES

DEFAULT_POLICIES = "binpack,spread,fgd,headroom"


def positive_int(value: str) -> int:
    n = _int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def seed(value: str) -> int:
    n = _int(value)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {n}")
    return n


def cost_weight(value: str) -> float:
    try:
        w = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value[:40]!r}") from None
    if not math.isfinite(w) or w < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, not {value[:40]!r}")
    return w


def policies(value: str) -> list[str]:
    """``binpack,fgd`` -> ``["binpack", "fgd"]``: known policies, each named once."""
    names = [p.strip() for p in value.split(",") if p.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one policy")
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown policy {unknown[0][:40]!r}; choose from {', '.join(sorted(POLICIES))}"
        )
    twice = sorted({p for p in names if names.count(p) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"policy {twice[0]!r} named twice")
    return names


def new_file(value: str) -> str:
    """A path whose folder exists (``--plot``, ``--db``): found wrong before the run."""
    if is_dsn(value):
        raise argparse.ArgumentTypeError("takes a file path (the run's SQLite ledger), not a DSN")
    folder = Path(value).parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"folder {str(folder)[:80]!r} does not exist")
    if Path(value).is_dir():
        raise argparse.ArgumentTypeError(f"{value[:80]!r} is a folder; name a file")
    return value


def ledger_paths(db: str, names: list[str]) -> dict[str, str]:
    """What ``--db PATH`` writes: PATH itself for one policy; for several, one SQLite
    ledger per policy beside it, ``sim.db`` -> ``sim-binpack.db``, ``sim-fgd.db``...
    (a ledger holds one cluster's grants; policies' runs must not share one). Raises
    ``ValueError`` if any of them exists: a run never appends to an older ledger."""
    if len(names) == 1:
        paths = {names[0]: db}
    else:
        p = Path(db)
        paths = {n: str(p.with_name(f"{p.stem}-{n}{p.suffix or '.db'}")) for n in names}
    taken = [path for path in paths.values() if os.path.exists(path)]
    if taken:
        raise ValueError(f"--db: {taken[0]} exists; remove it or name another file")
    return paths


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value[:40]!r}") from None
