"""A job batch's new jobs in groups that each fit one DynamoDB transaction (issue 32): at most
100 items (the tenant counter's update and each job's item, listing and first timer) and 4 MB."""

from __future__ import annotations

from datetime import UTC, datetime

from factories import job
from punctual.store.dynamo.sizes import job_item_sizes
from punctual.store.job_groups import GROUP_MAX_BYTES, GROUP_MAX_ITEMS
from punctual.timing.timers import TimerLayout
from punctual.usecases.job_groups import TIMER_BYTES, groups
from punctual.usecases.registration import NewJob, first_timer

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
LAYOUT = TimerLayout(shard_count=4, near_shard_count=2, far_threshold_s=180)


def _new(n: int, paused: bool = False, payload_kb: int = 0) -> NewJob:
    made = job(f"j{n}", schedule="cron(0 9 * * ? *)", now=NOW, payload={"k": "x" * payload_kb * 1024})
    return NewJob(made, None if paused else first_timer(LAYOUT, made, NOW))


def test_groups_hold_at_most_100_items_with_the_counter() -> None:
    with_timers = groups([_new(n) for n in range(100)])
    assert [len(g) for g in with_timers] == [33, 33, 33, 1]  # 1 + 33 x 3 = 100
    paused = groups([_new(n, paused=True) for n in range(100)])
    assert [len(g) for g in paused] == [49, 49, 2]  # 1 + 49 x 2 = 99: a 50th would make 101
    assert [n for g in with_timers for n in g] == list(range(100))  # every job once, in order


def test_groups_of_large_jobs_stay_within_a_transactions_4_mb() -> None:
    news = [_new(n, payload_kb=150) for n in range(40)]
    found = groups(news)
    assert len(found) > 2 and [n for g in found for n in g] == list(range(40))
    for group in found:
        size = sum(sum(job_item_sizes(news[n].job).values()) + TIMER_BYTES for n in group)
        assert size <= GROUP_MAX_BYTES and 1 + 3 * len(group) <= GROUP_MAX_ITEMS
