"""Step Functions' ``Retry``, as local mode applies it to its pollers.

The deployed minute state machine retries the poller task with the retriers of its
``Retry`` field; local mode reads that field from the template (``local/template.py``) and
follows it: :class:`local.poller.MinuteScheduler` retries a (minute, group) whose handler
raised, and the supervisor restarts a dead poller process, with the same delays.

The semantics are the States Language's: on an error, the first retrier whose
``ErrorEquals`` names it decides (``States.ALL`` names every error, ``States.TaskFailed``
every error but ``States.Timeout``). Its retry ``n`` (1-based) waits
``IntervalSeconds x BackoffRate^(n-1)``, at most ``MaxDelaySeconds``; with
``JitterStrategy: FULL`` a random wait between 0 and that. Each retrier counts its own
attempts; once a retrier has made ``MaxAttempts`` retries the error is not retried again
(it goes to the Catch), even if a later retrier names it too.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

ALL = "States.ALL"
TASK_FAILED = "States.TaskFailed"
TIMEOUT = "States.Timeout"
# The error Lambda reports when a function's runtime process exits (killed, out of memory):
# what a poller process that died is, to the state machine.
PROCESS_EXITED = "Runtime.ExitError"


def error_name(exc: BaseException) -> str:
    """The error a Lambda invocation reports for an unhandled exception: its type's name."""
    return type(exc).__name__


@dataclass(frozen=True)
class Retrier:
    """One retrier of a Task's ``Retry`` (the defaults are the States Language's)."""

    errors: tuple[str, ...]
    interval_s: float = 1.0
    max_attempts: int = 3
    backoff_rate: float = 2.0
    max_delay_s: float | None = None
    full_jitter: bool = False

    @classmethod
    def from_asl(cls, fields: Mapping[str, Any]) -> Retrier:
        max_delay = fields.get("MaxDelaySeconds")
        return cls(
            errors=tuple(fields["ErrorEquals"]),
            interval_s=float(fields.get("IntervalSeconds", 1)),
            max_attempts=int(fields.get("MaxAttempts", 3)),
            backoff_rate=float(fields.get("BackoffRate", 2.0)),
            max_delay_s=None if max_delay is None else float(max_delay),
            full_jitter=fields.get("JitterStrategy", "NONE") == "FULL",
        )

    def matches(self, error: str) -> bool:
        if ALL in self.errors or error in self.errors:
            return True
        return TASK_FAILED in self.errors and error != TIMEOUT

    def delay_s(self, retry: int, rng: random.Random | None = None) -> float:
        """The wait before retry number ``retry`` (1-based)."""
        delay = self.interval_s * self.backoff_rate ** (retry - 1)
        if self.max_delay_s is not None:
            delay = min(delay, self.max_delay_s)
        if self.full_jitter:
            delay = (rng or random).uniform(0, delay)
        return delay

    def delays_s(self) -> list[float]:
        """Every wait this retrier makes, without jitter."""
        steady = replace(self, full_jitter=False)
        return [steady.delay_s(n) for n in range(1, self.max_attempts + 1)]


def retriers_from(retry: Sequence[Mapping[str, Any]]) -> list[Retrier]:
    """The retriers of a Task's ``Retry`` field, in order."""
    return [Retrier.from_asl(fields) for fields in retry]


def retrier_for(retriers: Sequence[Retrier], error: str) -> Retrier | None:
    """The retrier that decides about ``error``: the first that names it."""
    return next((retrier for retrier in retriers if retrier.matches(error)), None)


class Attempts:
    """One task's attempts: whether an error is retried, and after how long."""

    def __init__(self, retriers: Sequence[Retrier], rng: random.Random | None = None) -> None:
        self.retriers = list(retriers)
        self.retries = [0] * len(self.retriers)
        self.rng = rng

    def next_delay_s(self, error: str) -> float | None:
        """The wait before retrying after ``error``; None when it is not retried (the Catch)."""
        for index, retrier in enumerate(self.retriers):
            if not retrier.matches(error):
                continue
            if self.retries[index] >= retrier.max_attempts:
                return None
            self.retries[index] += 1
            return retrier.delay_s(self.retries[index], self.rng)
        return None
