"""``headroom serve`` tunes its process before serving (see extender/runtime.py)."""

from __future__ import annotations

import subprocess
import sys


def test_tune_runtime_sets_what_the_benchmarks_rely_on() -> None:
    code = (
        "import gc, sys\n"
        "from extender.runtime import tune_malloc, tune_runtime\n"
        "tune_runtime()\n"
        "print(gc.get_threshold()[0], sys.getswitchinterval(), gc.get_freeze_count() > 0,"
        " tune_malloc())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[:3] == ["10000", "0.001", "True"]
    if sys.platform == "linux":  # glibc here (Debian); musl has no mallopt
        assert out[3] == "True"
