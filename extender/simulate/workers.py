"""The policies' runs side by side, one worker process each, as many as there are CPUs.

Each policy's run is independent: its own extender, ledger, clock and seeded cluster,
so running them in parallel changes no number, only the wall time (four policies on
two cores: about half). Workers are forked, so they start with everything imported;
they send progress and their result back on a queue. Where fork is not available, or
``jobs`` is 1, the runs go one after another in this process.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from extender.simulate import SimulationFailed
from extender.simulate.results import PolicyResult

RunOne = Callable[[str, Callable[[int], None]], PolicyResult]
"""``run_one(policy, advance)``: the policy's run, calling ``advance(pods)`` as it goes."""

PROGRESS_EVERY = 25  # pods between progress messages from a worker


class WorkerFailed(SimulationFailed):
    """A policy's worker ended without a result; the message says which and why."""


def run_policies(
    policies: Sequence[str],
    run_one: RunOne,
    jobs: int,
    advance: Callable[[int], None],
    finished: Callable[[PolicyResult], None],
) -> list[PolicyResult]:
    """Every policy's result, in the order given."""
    if jobs <= 1 or len(policies) == 1 or not _can_fork():
        results = []
        for policy in policies:
            results.append(run_one(policy, advance))
            finished(results[-1])
        return results
    return _forked(policies, run_one, jobs, advance, finished)


def _can_fork() -> bool:
    # forking a process with threads copies their locks mid-use: only from a lone thread
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def _forked(
    policies: Sequence[str],
    run_one: RunOne,
    jobs: int,
    advance: Callable[[int], None],
    finished: Callable[[PolicyResult], None],
) -> list[PolicyResult]:
    ctx = multiprocessing.get_context("fork")
    messages: Any = ctx.Queue()
    waiting = list(enumerate(policies))
    running: dict[int, Any] = {}
    results: dict[int, PolicyResult] = {}
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                i, policy = waiting.pop(0)
                proc = ctx.Process(target=_worker, args=(i, policy, run_one, messages))
                proc.start()
                running[i] = proc
            try:
                kind, i, payload = messages.get(timeout=1.0)
            except queue.Empty:
                _check_alive(running, policies)
                continue
            if kind == "progress":
                advance(payload)
            elif kind == "done":
                results[i] = payload
                running.pop(i).join()
                finished(payload)
            else:
                raise WorkerFailed(f"policy {policies[i]}: {payload}")
    finally:
        for proc in running.values():
            proc.terminate()
            proc.join()
    return [results[i] for i in range(len(policies))]


def _check_alive(running: dict[int, Any], policies: Sequence[str]) -> None:
    for i, proc in running.items():
        if not proc.is_alive() and proc.exitcode != 0:
            raise WorkerFailed(f"policy {policies[i]}: worker exited with code {proc.exitcode}")


def _worker(i: int, policy: str, run_one: RunOne, messages: Any) -> None:
    pending = 0

    def advance(pods: int) -> None:
        nonlocal pending
        pending += pods
        if pending >= PROGRESS_EVERY:
            messages.put(("progress", i, pending))
            pending = 0

    try:
        result = run_one(policy, advance)
    except KeyboardInterrupt:  # the parent got it too and stops the run: no traceback here
        return
    except Exception as e:  # reported to the parent as one line, not a worker traceback
        messages.put(("error", i, f"{type(e).__name__}: {e}"))
        return
    if pending:
        messages.put(("progress", i, pending))
    messages.put(("done", i, result))
