"""The one retry policy, for both sides: exponential backoff plus jitter, bounded in time.

Bounded because every caller sits on someone's deadline (kube-scheduler's httpTimeout
for a bind, the agent's report interval): a retry that outlives the deadline only adds
load to whatever is already failing, so no sleep is started that would end past it.
The jitter is added on top of the exponential step (up to one base step), so a fleet
of agents that lost the extender together does not retry in lockstep, yet no retry
comes sooner than its step. It lives in the wire package because the agent's report
sender and the extender's API calls both use it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    stop_when_event_set,
    wait_exponential_jitter,
    wait_random_exponential,
)

T = TypeVar("T")


def retrying(
    transient: Callable[[BaseException], bool],
    *,
    deadline_s: float,
    attempts: int = 5,
    base_s: float = 0.05,
    cap_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    before_sleep: Callable[[RetryCallState], None] | None = None,
) -> Retrying:
    """A tenacity ``Retrying`` that retries ``transient`` errors until the deadline:
    waits ``base_s * 2**(n-1) + U(0, base_s)``, capped at ``cap_s``; at most ``attempts``
    tries; never a sleep that would end after ``deadline_s``. ``sleep`` is injectable so
    tests run without waiting; ``before_sleep`` logs the retry."""
    return Retrying(
        retry=retry_if_exception(transient),
        wait=wait_exponential_jitter(multiplier=base_s, max=cap_s, jitter=base_s),
        stop=stop_after_attempt(attempts) | stop_before_delay(max(deadline_s, 0.0)),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )


def call_with_retry(
    fn: Callable[[], T], transient: Callable[[BaseException], bool], *, deadline_s: float
) -> T:
    return retrying(transient, deadline_s=deadline_s)(fn)


def reconnecting(
    stop: threading.Event,
    on_retry: Callable[[BaseException | None, float], None],
    *,
    base_s: float = 0.5,
    cap_s: float = 30.0,
) -> Retrying:
    """Retry a long-lived connection (a watch) until ``stop`` is set: jittered
    exponential backoff, capped; the sleep wakes up as soon as ``stop`` is set."""

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        on_retry(error, state.upcoming_sleep)

    def sleep(seconds: float) -> None:
        stop.wait(seconds)

    return Retrying(
        retry=retry_if_exception_type(Exception),
        wait=wait_random_exponential(multiplier=base_s, max=cap_s),
        stop=stop_when_event_set(stop),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,  # only reached once ``stop`` is set: the caller is shutting down
    )
