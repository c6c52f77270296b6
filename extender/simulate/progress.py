"""How a run shows it is alive: a bar on a terminal, one line per policy elsewhere.

Off a terminal (CI logs, ``| tee``) a bar is either nothing or a screenful of carriage
returns, and a run that prints nothing for a minute looks hung; a line per finished
policy with its elapsed time says what was done and how long it took.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm import tqdm


class Progress:
    """``advance(pods)`` as pods are scheduled; ``finished(policy, placed, pods)`` per
    policy. ``bar=None`` decides by whether ``out`` is a terminal."""

    def __init__(self, total: int, out: TextIO | None = None, bar: bool | None = None) -> None:
        self.out = out or sys.stderr
        self.start = time.monotonic()
        use_bar = self.out.isatty() if bar is None else bar
        # no monitor thread: the policies' worker processes are forked after this
        tqdm.monitor_interval = 0
        self._bar = (
            tqdm(total=total, desc="simulating", unit="pod", file=self.out) if use_bar else None
        )

    def advance(self, pods: int) -> None:
        if self._bar is not None:
            self._bar.update(pods)

    def finished(self, policy: str, placed: int, pods: int) -> None:
        if self._bar is None:
            elapsed = time.monotonic() - self.start
            print(
                f"simulate: {policy} done at {elapsed:.1f} s ({placed} of {pods} pods placed)",
                file=self.out,
                flush=True,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
