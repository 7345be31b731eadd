"""The dispatch and execution paths on a store as stale and as contentious as DynamoDB.

Each scenario runs the whole scheduler (pollers, worker, job service, backfill runner, alerts:
:mod:`fidelity_cluster`) twice on the same timeline: on a store whose eventually consistent
reads are up to a second behind (random per read) and where half of the writes on items a
transaction holds meet a conflict, and on a store that is neither (the reference). The outcome
must be the same: every slot with the same final status, run by the target once, the same
alerts. Actions land well clear of slot instants where the rules let a read that is behind
decide differently (a pause a moment before a slot may let that slot run), and right before
them everywhere else (a replace, a registration, a calendar change half a second before a slot).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from factories import spec
from fidelity_cluster import TENANT, Cluster
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.usecases.calendars import Calendar

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
SEEDS = [11, 12]

Scenario = Callable[[Cluster], None]


def outcome(cluster: Cluster, jobs: list[str]) -> dict[str, Any]:
    """What happened to each job: every slot's final status, and the target's first-attempt calls."""
    return {
        job_id: {
            "statuses": {slot: status.value for slot, status in cluster.statuses(job_id).items()},
            "calls": dict(cluster.runs(job_id)),
            "alerts": dict(cluster.alerts(job_id)),
        }
        for job_id in jobs
    }


def both(
    scenario: Scenario, jobs: list[str], seconds: float, seed: int, **options: Any
) -> tuple[Any, Any, Cluster]:
    reference = Cluster(T0, seed, stale_read_s=0.0, conflict_share=0.0, **options)
    scenario(reference)
    reference.run(seconds)
    faithful = Cluster(T0, seed, **options)
    scenario(faithful)
    faithful.run(seconds)
    return outcome(reference, jobs), outcome(faithful, jobs), faithful


def check(scenario: Scenario, jobs: list[str], seconds: float, seed: int, **options: Any) -> dict[str, Any]:
    expected, got, cluster = both(scenario, jobs, seconds, seed, **options)
    # The simulation really was behind and contentious...
    print(f"stale answers {cluster.fidelity.stale_answers}, conflicts {cluster.fidelity.conflicts_injected}")
    # ...every slot the target ran, it ran once...
    for job_id in jobs:
        assert set(got[job_id]["calls"].values()) <= {1}, (job_id, got[job_id]["calls"])
    # ...and the outcome is the reference's, slot for slot
    assert got == expected
    return got


@pytest.mark.parametrize("seed", SEEDS)
def test_registrations_just_before_their_first_slot(seed: int) -> None:
    def scenario(c: Cluster) -> None:
        c.at(0.3, c.register("fast", spec("rate(2 seconds)", start_at="2026-11-30T10:00:01Z")))
        c.at(0.5, c.register("once", spec("at(2026-11-30T10:00:01)")))
        c.at(59.4, c.register("minutely", spec("cron(* * * * ? *)")))
        c.at(20.2, c.register("every5", spec("rate(5 seconds)")))

    got = check(scenario, ["fast", "once", "minutely", "every5"], 125, seed)
    assert len(got["fast"]["calls"]) >= 60 and got["once"]["calls"] == {"2026-11-30T10:00:01Z": 1}
    assert len(got["minutely"]["calls"]) == 2


@pytest.mark.parametrize("seed", SEEDS)
def test_replaces_just_before_a_slot(seed: int) -> None:
    def scenario(c: Cluster) -> None:
        c.at(0.0, c.register("job", spec("rate(5 seconds)", payload={"v": 0})))
        for n, second in enumerate((9.6, 19.5, 29.8, 44.7), start=1):
            c.at(
                second,
                lambda n=n: c.service.replace(TENANT, "job", spec("rate(5 seconds)", payload={"v": n})),
            )
        c.at(60.5, lambda: c.service.replace(TENANT, "job", spec("rate(3 seconds)", payload={"v": 9})))

    got = check(scenario, ["job"], 100, seed)
    assert len(got["job"]["calls"]) > 20


@pytest.mark.parametrize("seed", SEEDS)
def test_pause_and_resume_under_each_catch_up_policy(seed: int) -> None:
    def scenario(c: Cluster) -> None:
        for policy in ("all", "latest", "none"):
            c.at(0.0, c.register(policy, spec("rate(5 seconds)", catchup={"policy": policy})))
            c.at(12.5, lambda policy=policy: c.service.pause(TENANT, policy))
            c.at(102.5, lambda policy=policy: c.service.resume(TENANT, policy))

    got = check(scenario, ["all", "latest", "none"], 140, seed)
    assert len(got["all"]["calls"]) > len(got["latest"]["calls"]) >= len(got["none"]["calls"]) > 5


@pytest.mark.parametrize("seed", SEEDS)
def test_catch_up_after_the_pollers_were_down(seed: int) -> None:
    def scenario(c: Cluster) -> None:
        c.at(0.0, c.register("all", spec("rate(4 seconds)")))
        c.at(0.0, c.register("none", spec("rate(4 seconds)", catchup={"policy": "none"})))
        c.at(
            0.0,
            c.register(
                "alerting", spec("rate(4 seconds)", catchup={"policy": "none"}, alerts=[MISSED_ALERT])
            ),
        )
        c.down = (20.5, 110.5)  # pollers and workers down for 90 s

    got = check(scenario, ["all", "none", "alerting"], 150, seed)
    assert "MISSED" in got["none"]["statuses"].values()
    assert any(condition == "missed" for _, condition in got["alerting"]["alerts"])


MISSED_ALERT = {"on": ["missed"], "target": {"type": "http", "url": "https://alerts.example.com/hook"}}
FAILED_ALERT = {"on": ["failed"], "target": {"type": "http", "url": "https://alerts.example.com/hook"}}


def flaky(ctx: SlotContext) -> TargetResult:
    """Every slot's first attempt fails (retried 3 s later); ``broken`` always fails."""
    if ctx.job_id == "broken":
        return TargetResult.permanent("HTTP 500")
    return TargetResult.retryable("HTTP 503") if ctx.attempt == 1 else TargetResult.ok()


@pytest.mark.parametrize("seed", SEEDS)
def test_overlap_retries_and_failure_alerts(seed: int) -> None:
    retry = {"max_attempts": 3, "backoff": "fixed", "base_seconds": 3, "max_seconds": 3, "jitter": False}

    def scenario(c: Cluster) -> None:
        c.at(0.0, c.register("queue", spec("rate(2 seconds)", overlap="queue", retry=retry)))
        c.at(0.0, c.register("skip", spec("rate(2 seconds)", overlap="skip", retry=retry)))
        c.at(0.0, c.register("allow", spec("rate(2 seconds)", retry=retry)))
        c.at(
            0.0,
            c.register("broken", spec("rate(10 seconds)", retry={"max_attempts": 1}, alerts=[FAILED_ALERT])),
        )

    got = check(scenario, ["queue", "skip", "allow", "broken"], 90, seed, answer=flaky)
    assert "SKIPPED" in got["skip"]["statuses"].values()
    assert len(got["broken"]["alerts"]) >= 8


@pytest.mark.parametrize("seed", SEEDS)
def test_after_children_registered_before_their_parent_runs(seed: int) -> None:
    # A child runs for its parents' slots that start a second (DynamoDB's staleness) after it was
    # registered: the parent's worker reads whether any child waits eventually consistently.
    def scenario(c: Cluster) -> None:
        c.at(0.0, c.register("parent", spec("rate(5 seconds)")))
        c.at(0.0, c.register("other", spec("rate(5 seconds)")))
        c.at(3.5, c.register("child", spec("after(parent)")))
        c.at(8.4, c.register("both", spec("after(parent, other)")))

    got = check(scenario, ["parent", "other", "child", "both"], 60, seed)
    assert len(got["child"]["calls"]) >= 11 and len(got["both"]["calls"]) >= 10


@pytest.mark.parametrize("seed", SEEDS)
def test_a_backfill_runs_each_past_slot_once(seed: int) -> None:
    def scenario(c: Cluster) -> None:
        c.at(0.0, c.register("hourly", spec("cron(0 * * * ? *)")))
        c.at(0.4, lambda: c.backfills.start(TENANT, "hourly", T0 - timedelta(hours=6), T0))

    got = check(scenario, ["hourly"], 60, seed)
    assert len(got["hourly"]["calls"]) == 6


@pytest.mark.parametrize("seed", SEEDS)
def test_calendar_changes_a_moment_before_a_slot(seed: int) -> None:
    def calendar(c: Cluster, dates: list[str], version: int) -> Calendar:
        return Calendar(
            tenant=TENANT,
            name="freeze",
            timezone="UTC",
            dates=dates,
            version=version,
            created_at=T0,
            updated_at=c.clock.now(),
        )

    def scenario(c: Cluster) -> None:
        c.at(0.0, lambda: c.store.put_calendar(calendar(c, ["2026-11-30"], 1), None))
        c.at(
            0.1, c.register("job", spec("rate(5 seconds)", exclude_calendars=["freeze"]))
        )  # slots :01, :06, ...
        # The freeze is lifted half a second before :31: that slot runs (a read that is behind
        # must not exclude it). It is put back 1.5 s before 1:01 (a change applies to slots a
        # second after it: a read that is behind may still see the calendar without it).
        c.at(30.5, lambda: c.store.put_calendar(calendar(c, [], 2), 1))
        c.at(59.5, lambda: c.store.put_calendar(calendar(c, ["2026-11-30"], 3), 2))

    got = check(scenario, ["job"], 90, seed)
    statuses = got["job"]["statuses"]
    assert statuses["2026-11-30T10:00:26Z"] == "EXCLUDED" and statuses["2026-11-30T10:00:31Z"] == "SUCCEEDED"
    assert statuses["2026-11-30T10:00:56Z"] == "SUCCEEDED" and statuses["2026-11-30T10:01:01Z"] == "EXCLUDED"
