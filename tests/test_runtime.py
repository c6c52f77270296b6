"""``headroom serve`` tunes its process before serving (see extender/core/runtime.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.serveproc import ServeProc


def _printed(code: str) -> list[str]:
    """What ``code`` prints in a fresh interpreter (collector and malloc settings are
    process-wide: a test must not change them under the others)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()


def test_tune_runtime_sets_what_the_benchmarks_rely_on() -> None:
    code = (
        "import gc, sys\n"
        "from extender.core.runtime import tune_malloc, tune_runtime\n"
        "tune_runtime()\n"
        "print(gc.get_threshold()[0], sys.getswitchinterval(), gc.get_freeze_count() > 0,"
        " tune_malloc())\n"
    )
    out = _printed(code)
    assert out[:3] == ["50000", "0.001", "True"]  # automatic: a backstop (collect_due)
    if sys.platform == "linux":  # glibc here (Debian); musl has no mallopt
        assert out[3] == "True"


def test_collect_due_runs_the_collection_cpythons_schedule_would_run_next() -> None:
    """Reports and binds call it: young collections once ``young`` objects are new, the
    middle generation after more than its threshold of young ones, as CPython would."""
    code = (
        "import gc\n"
        "from extender.core.runtime import collect_due\n"
        "gc.disable()\n"  # only collect_due collects
        "gc.collect()\n"
        "keep = []\n"
        "done = [collect_due(young=1000)]\n"  # nothing new yet: none due
        "for _ in range(12):\n"
        "    keep.extend([] for _ in range(1500))\n"
        "    done.append(collect_due(young=1000))\n"
        "    assert gc.get_count()[0] < 1000\n"
        "print(*done, gc.get_count()[2])\n"
    )
    out = _printed(code)
    # 11 young collections, then the 12th finds the middle generation due (10, default)
    assert out == ["-1"] + ["0"] * 11 + ["1", "1"]


def test_serve_runs_on_uvloop(tmp_path: Path) -> None:
    """A real ``headroom serve`` says at start which event loop serves it: uvloop (a
    dependency), not the pure-Python loop ``asyncio.run`` gives by default."""
    serve = ServeProc(tmp_path, str(tmp_path / "h.db"))
    serve.start()
    try:
        assert httpx.get(f"{serve.url}/healthz").status_code == 200
        edge = [line for line in serve.log_tail(100_000).splitlines() if "HTTP edge" in line]
        assert edge and '"event_loop": "uvloop"' in edge[0], edge
    finally:
        serve.stop()
