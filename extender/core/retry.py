"""The one retry policy: exponential backoff with full jitter, bounded in time.

Bounded because every caller sits on someone's deadline (kube-scheduler's httpTimeout
for a bind, the agent's report interval): a retry that outlives the deadline only adds
load to whatever is already failing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    stop_when_event_set,
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
) -> Retrying:
    """A tenacity ``Retrying`` that retries ``transient`` errors until the deadline."""
    return Retrying(
        retry=retry_if_exception(transient),
        wait=wait_random_exponential(multiplier=base_s, max=cap_s),
        stop=stop_after_delay(deadline_s) | stop_after_attempt(attempts),
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
