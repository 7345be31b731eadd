"""Backoff instants: fixed, linear, exponential; cap; full jitter; Retry-After; max attempts; max age."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from punctual.models import Backoff, RetryPolicy
from punctual.timing.retries import backoff_ceiling_s, next_retry_at, retry_delay_s, seeded_random

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


class Fixed:
    """A jitter source that always draws the same fraction of the range."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.fraction


def policy(**overrides: object) -> RetryPolicy:
    data: dict[str, object] = {"max_attempts": 6, "base_seconds": 2, "max_seconds": 300, "jitter": False}
    data.update(overrides)
    return RetryPolicy.model_validate(data)


def instants(p: RetryPolicy, failures: int, fraction: float = 1.0) -> list[float | None]:
    """Seconds after T0 of each retry when every attempt fails at its own due instant."""
    out: list[float | None] = []
    failed_at = T0
    for attempt in range(1, failures + 1):
        due = next_retry_at(
            p, failed_attempt=attempt, failed_at=failed_at, scheduled_at=T0, rng=Fixed(fraction)
        )
        out.append(None if due is None else (due - T0).total_seconds())
        if due is None:
            break
        failed_at = due
    return out


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [
        (Backoff.FIXED, [5, 10, 15, 20, 25]),  # 5 s each time
        (Backoff.LINEAR, [5, 15, 30, 50, 75]),  # 5, 10, 15, 20, 25
        (Backoff.EXPONENTIAL, [5, 15, 35, 75, 155]),  # 5, 10, 20, 40, 80
    ],
)
def test_retry_instants_without_jitter(backoff: Backoff, expected: list[float]) -> None:
    p = policy(backoff=backoff, base_seconds=5, max_attempts=6)
    assert instants(p, 6) == [*expected, None]  # the sixth failure is the last attempt


def test_every_kind_is_capped_at_max_seconds() -> None:
    p = policy(backoff=Backoff.EXPONENTIAL, base_seconds=10, max_seconds=60, max_attempts=100)
    assert [backoff_ceiling_s(p, n) for n in (1, 2, 3, 4, 5, 50, 100)] == [10, 20, 40, 60, 60, 60, 60]
    linear = policy(backoff=Backoff.LINEAR, base_seconds=25, max_seconds=60)
    assert [backoff_ceiling_s(linear, n) for n in (1, 2, 3)] == [25, 50, 60]


@pytest.mark.parametrize("backoff", list(Backoff))
def test_full_jitter_draws_between_zero_and_the_capped_wait(backoff: Backoff) -> None:
    p = policy(backoff=backoff, base_seconds=5, max_seconds=30, jitter=True)
    assert instants(p, 3, fraction=0.0) == [0.0, 0.0, 0.0]  # the bottom of every range
    top = instants(p, 3, fraction=1.0)
    assert top == instants(policy(backoff=backoff, base_seconds=5, max_seconds=30, jitter=False), 3)


@given(
    backoff=st.sampled_from(list(Backoff)),
    base=st.floats(min_value=0.1, max_value=100),
    cap_factor=st.floats(min_value=1, max_value=1000),
    attempt=st.integers(min_value=1, max_value=100),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_jittered_delay_always_within_bounds(
    backoff: Backoff, base: float, cap_factor: float, attempt: int, seed: int
) -> None:
    p = RetryPolicy(
        backoff=backoff, base_seconds=base, max_seconds=min(base * cap_factor, 7 * 86400), jitter=True
    )
    delay = retry_delay_s(p, attempt, random.Random(seed))
    assert 0.0 <= delay <= backoff_ceiling_s(p, attempt) <= p.max_seconds


def test_retry_after_lengthens_the_wait_but_never_past_the_cap() -> None:
    p = policy(backoff=Backoff.FIXED, base_seconds=5, max_seconds=120)
    assert retry_delay_s(p, 1, Fixed(1.0), retry_after_s=90) == 90
    assert retry_delay_s(p, 1, Fixed(1.0), retry_after_s=3600) == 120  # capped
    assert retry_delay_s(p, 1, Fixed(1.0), retry_after_s=1) == 5  # never shorter than the backoff


def test_max_attempts_counts_the_first_attempt() -> None:
    p = policy(max_attempts=3)
    assert next_retry_at(p, failed_attempt=2, failed_at=T0, scheduled_at=T0, rng=Fixed(1)) is not None
    assert next_retry_at(p, failed_attempt=3, failed_at=T0, scheduled_at=T0, rng=Fixed(1)) is None
    one = policy(max_attempts=1)
    assert next_retry_at(one, failed_attempt=1, failed_at=T0, scheduled_at=T0, rng=Fixed(1)) is None


def test_no_retry_due_past_max_age_from_the_scheduled_instant() -> None:
    p = policy(backoff=Backoff.FIXED, base_seconds=60, max_age_seconds=300, max_attempts=100)
    # Given a slot scheduled at T0 whose attempts fail a minute apart
    assert instants(p, 100) == [60, 120, 180, 240, 300, None]  # due at exactly T0 + max age is allowed
    # A slot that first ran late gets fewer retries: the age counts from the schedule, not the start
    late = next_retry_at(
        p, failed_attempt=1, failed_at=T0 + timedelta(seconds=250), scheduled_at=T0, rng=Fixed(1)
    )
    assert late is None


def test_seeded_random_is_the_same_for_the_same_attempt_only() -> None:
    draws = [seeded_random("job", "2026-11-30T10:00:00Z", 1).uniform(0, 100) for _ in range(3)]
    assert len(set(draws)) == 1
    assert seeded_random("job", "2026-11-30T10:00:00Z", 2).uniform(0, 100) != draws[0]
