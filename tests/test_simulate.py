"""``headroom simulate`` end to end: a real extender, simulated agents over HTTP."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from extender.cli import main
from extender.simulate.progress import Progress


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extender.cli", "simulate", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=check,
    )


def test_simulate_compares_policies_as_json_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "cmp.png"
    out = run(
        "--nodes",
        "8",
        "--pods",
        "60",
        "--policy",
        "binpack,fgd",
        "--seed",
        "3",
        "--json",
        "--plot",
        str(png),
    )
    results = json.loads(out.stdout)
    assert [r["policy"] for r in results] == ["binpack", "fgd"]
    for r in results:
        assert r["placed"] + r["unplaceable"] == 60
        assert r["placed"] > 0
        assert 0 < r["allocation_rate"] <= 1
        assert r["on_demand_pods_on_spot"] == 0
        assert r["usd_per_gib_hour"] > 0
        # the run's chargeback, from its own ledger: every cent of the bill is accounted for
        charged = sum(Decimal(v) for v in r["charges"].values())
        assert charged > 0
        assert charged + Decimal(r["idle_usd"]) == Decimal(r["gpu_bill_usd"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the policies ran side by side in worker processes; one after another in this
    # process they give the same numbers, to the cent
    alone = json.loads(
        run(
            "--nodes",
            "8",
            "--pods",
            "60",
            "--policy",
            "binpack,fgd",
            "--seed",
            "3",
            "--json",
            "--jobs",
            "1",
        ).stdout
    )
    assert [{**r, "ledger": ""} for r in alone] == [{**r, "ledger": ""} for r in results]


def test_simulate_table_and_kept_ledger(tmp_path: Path) -> None:
    db = tmp_path / "sim.db"
    out = run("--nodes", "6", "--pods", "30", "--policy", "spread", "--db", str(db))
    assert "policy" in out.stdout and "spread" in out.stdout and "$/GiB-h" in out.stdout
    assert "charges + idle = GPU bill, to the cent" in out.stdout
    assert db.exists() and db.stat().st_size > 0


@pytest.mark.parametrize(
    "args, says",
    [
        (["--nodes", "0"], "argument --nodes: must be at least 1, not 0"),
        (["--pods", "-5"], "argument --pods: must be at least 1, not -5"),
        (["--pods", "ten"], "argument --pods: not a whole number: 'ten'"),
        (["--policy", "binpack,best"], "argument --policy: unknown policy 'best'; choose from"),
        (["--policy", "fgd,fgd"], "argument --policy: policy 'fgd' named twice"),
        (["--policy", ","], "argument --policy: name at least one policy"),
        (["--cost-weight", "-1"], "argument --cost-weight: must be a finite number >= 0"),
        (["--seed", "-3"], "argument --seed: must be 0 or more"),
        (["--jobs", "0"], "argument --jobs: must be at least 1"),
        (["--db", "/no/such/dir/sim.db"], "argument --db: folder '/no/such/dir' does not exist"),
        (["--db", "postgresql://h/db"], "argument --db: takes a file path"),
        (["--plot", "/no/such/dir/c.png"], "argument --plot: folder '/no/such/dir'"),
    ],
)
def test_a_wrong_flag_is_one_line_and_exit_2(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["simulate", *args])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_every_flag_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = capsys.readouterr().out
    flags = re.findall(r"^  (--[a-z-]+)", text, re.M)
    assert {"--nodes", "--pods", "--policy", "--db", "--jobs"} <= set(flags)
    for flag in flags:  # each flag's line, or the one after it, says what it is
        after = text.split(f"  {flag}", 1)[1].split("\n  --", 1)[0]
        assert len(after.split()) > 3, flag


def test_progress_off_a_terminal_and_the_ledgers_it_names(tmp_path: Path) -> None:
    db = tmp_path / "sim.db"
    args = ("--nodes", "6", "--pods", "30", "--policy", "binpack,fgd", "--db", str(db))
    out = run(*args)
    # off a terminal: no bar, one line per policy with its elapsed time
    assert "\r" not in out.stderr
    done = [line for line in out.stderr.splitlines() if line.startswith("simulate:")]
    assert sorted(line.split()[1] for line in done) == ["binpack", "fgd"]
    assert all(re.search(r"done at \d+\.\d s \(\d+ of 30 pods placed\)$", line) for line in done)
    # --db with two policies: one ledger each beside the named path, each file named
    for policy in ("binpack", "fgd"):
        ledger = tmp_path / f"sim-{policy}.db"
        assert ledger.stat().st_size > 0
        assert f"ledger of {policy} written to {ledger}" in out.stderr
    assert not db.exists()
    # a second run never appends to the first's ledgers
    again = run(*args, check=False)
    assert again.returncode == 2
    assert again.stderr.strip() == (
        f"headroom simulate: --db: {tmp_path / 'sim-binpack.db'} exists; "
        "remove it or name another file"
    )


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_terminal_and_lines_elsewhere() -> None:
    for out in (_Terminal(), io.StringIO()):
        progress = Progress(60, out)
        progress.advance(30)
        progress.finished("fgd", 25, 30)
        progress.advance(30)
        progress.finished("binpack", 28, 30)
        progress.close()
        text = out.getvalue()
        if out.isatty():
            assert "60/60" in text and "done at" not in text
        else:
            assert [line.split()[:3] for line in text.splitlines()] == [
                ["simulate:", "fgd", "done"],
                ["simulate:", "binpack", "done"],
            ]
