"""Every user-facing error of the ``headroom`` command is one line that names what is
wrong, and a non-zero exit; never a traceback. One case per class of mistake: a flag
value, a file that cannot be read, a price file that does not parse, a ledger path that
cannot be opened, a DSN that is malformed or unreachable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def headroom(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extender.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def error_lines(stderr: str) -> list[str]:
    """What the command said, less its structured log lines (JSON objects)."""
    return [line for line in stderr.splitlines() if line and not line.startswith("{")]


@pytest.mark.parametrize(
    "case, args, says",
    [
        ("flag value", ["serve", "--port", "eighty"], "--port"),
        ("setting out of range", ["serve", "--stale-after", "-1"], "--stale-after"),
        ("unknown command", ["serve-all"], "invalid choice"),
        ("missing token file", ["serve", "--agent-token-file", "{tmp}/no-such-token"], "no-such"),
        ("token file is a folder", ["serve", "--agent-token-file", "{tmp}"], "Is a directory"),
        ("bad price file", ["serve", "--price-file", "{tmp}/prices.yaml"], "prices.yaml"),
        ("missing price file", ["serve", "--price-file", "{tmp}/none.yaml"], "none.yaml"),
        ("ledger folder missing", ["serve", "--db", "{tmp}/no/dir/l.db"], "l.db"),
        ("malformed DSN", ["serve", "--db", "postgresql://%zz"], "postgresql"),
        (
            "unreachable DSN",
            ["ledger", "verify", "--db", "postgresql://nobody@127.0.0.1:1/x"],
            "cannot connect",
        ),
        ("no ledger file", ["ledger", "chargeback", "--db", "{tmp}/none.db"], "none.db"),
        ("bad window", ["ledger", "export", "--from", "last week"], "--from"),
        ("simulate flag", ["simulate", "--pods", "-5"], "--pods"),
    ],
)
def test_a_user_error_is_one_line(case: str, args: list[str], says: str, tmp_path: Path) -> None:
    (tmp_path / "prices.yaml").write_text("instance_types: {g5.xlarge: {spot: [")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if args[0] == "serve":  # never start serving: nothing may be left listening
        args += ["--port", "1", "--host", "256.0.0.1"] if "--port" not in args else []
        args += [] if "--db" in args else ["--db", str(tmp_path / "l.db")]
    res = headroom(args, tmp_path)
    assert res.returncode != 0, case
    assert "Traceback" not in res.stderr, res.stderr
    lines = error_lines(res.stderr)
    assert len(lines) == 1, (case, res.stderr)
    assert says in lines[0], (case, lines[0])
