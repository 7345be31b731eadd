"""Local mode end to end: real processes on loopback, driven over HTTP and with the ``punctual`` CLI.

The tests share one ``punctual-local up`` and run in file order, so that waiting for a
cron minute overlaps with the other tests: the schedule kinds are registered first and
checked later; the kill tests run after the on-time check (a killed worker legitimately
delays its slot); the last test stops local mode and reads its summary line.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from local.harness import LocalMode, alive

pytestmark = pytest.mark.e2e

SETTLE_S = 12.0  # a slot younger than this may still be on its way
LATE_S = 30.0  # see test_every_kind_fires_on_time_and_each_slot_once
PAYLOAD = {"job": "<job_id>", "slot": "<slot>", "attempt": "<attempt>", "scheduled_at": "<scheduled_at>"}


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def seconds(slot: str) -> float:
    return instant(slot.split("~", 1)[0]).timestamp()


@dataclass
class Registered:
    key: str
    body: dict[str, Any]
    sent_at: float  # just before the request
    answered_at: float = field(default_factory=time.time)

    @property
    def id(self) -> str:
        return str(self.body["id"])


def register(local: LocalMode, key: str, schedule: str, **extra: Any) -> Registered:
    hook = extra.pop("hook", key)
    spec = {
        "name": f"e2e {key}",
        "schedule": schedule,
        "target": {"type": "http", "url": local.hook(hook)},
        "payload": PAYLOAD,
        "timeout_seconds": 10,
        **extra,
    }
    sent_at = time.time()
    status, body = local.api("POST", "/v1/jobs", spec)
    assert status == 201, body
    return Registered(key, body, sent_at)


def by_key(local: LocalMode, job_id: str) -> dict[str, list[dict[str, Any]]]:
    """The receiver's requests for one job, per slot, in arrival order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for record in local.records():
        if record.get("job") == job_id:
            out.setdefault(str(record["slot"]), []).append(record)
    return out


def succeeded_slots(local: LocalMode, job_id: str) -> list[str]:
    return sorted(
        slot
        for slot, seen in by_key(local, job_id).items()
        if any(200 <= (r.get("status") or 0) < 300 for r in seen)
    )


def assert_each_attempt_once(local: LocalMode, job_id: str) -> dict[str, list[dict[str, Any]]]:
    """No attempt of any slot reached the receiver twice, and every request carried its slot's key."""
    seen = by_key(local, job_id)
    for slot, records in seen.items():
        attempts = [r["attempt"] for r in records]
        assert len(attempts) == len(set(attempts)), f"{job_id} {slot}: attempts {attempts} delivered twice"
        assert {r["key"] for r in records} == {f"{job_id}:{slot}"}
    return seen


def history(local: LocalMode, job_id: str) -> list[dict[str, Any]]:
    """A job's executions through the API, every page."""
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        status, body = local.api("GET", f"/v1/jobs/{job_id}/executions?limit=100{token}")
        assert status == 200, body
        items.extend(body["items"])
        if not body.get("next_token"):
            return items
        token = f"&next_token={quote(body['next_token'])}"


def expected_slots(first: str, period_s: int, until: float) -> list[str]:
    start = instant(first)
    out = []
    slot = start
    while slot.timestamp() <= until:
        out.append(slot.strftime("%Y-%m-%dT%H:%M:%SZ"))
        slot += timedelta(seconds=period_s)
    return out


def first_slot(local: LocalMode, job: Registered) -> str:
    """A recurring job's first slot: its registration's ``next_fire_at``, or a slot between the
    job's creation and that instant which ran. ``next_fire_at`` is the next slot as of the answer:
    when registration takes longer than the schedule's period (a loaded machine: 1.7 s, seen), the
    first slot fires before the answer is made, and the answer names the one after it."""
    created, answered = seconds(job.body["created_at"]), seconds(job.body["next_fire_at"])
    early = [slot for slot in succeeded_slots(local, job.id) if created <= seconds(slot) < answered]
    return min(early) if early else job.body["next_fire_at"]


# ------------------------------------------------------------------------------- the kinds


@pytest.fixture(scope="module")
def kinds(local_mode: LocalMode) -> Iterator[dict[str, Registered]]:
    """One job of every schedule kind, registered over plain HTTP as early as possible."""
    local = local_mode
    now = datetime.now(UTC)
    at = (now + timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%S")
    jobs = {
        "rate": register(local, "rate", "rate(5 seconds)"),
        "cron": register(local, "cron", "* * * * *"),
        "aws-cron": register(local, "aws-cron", "cron(* * * * ? *)", timezone="Europe/Berlin"),
        "at": register(local, "at", f"at({at})"),
        "delay": register(local, "delay", "delay(10 seconds)"),
        "ecs": register(local, "ecs", "rate(10 seconds)", runtime="ecs"),
    }
    parents = f"{jobs['cron'].id}, {jobs['aws-cron'].id}"
    jobs["after"] = register(local, "after", f"after({parents})")
    yield jobs


def test_each_schedule_kind_registers_with_its_first_slot(kinds: dict[str, Registered]) -> None:
    # Then each kind got the first slot its schedule gives (none for after())
    for key, job in kinds.items():
        assert job.body["state"] == "ENABLED", key
    assert kinds["after"].body["next_fire_at"] is None
    for key in ("cron", "aws-cron"):
        assert kinds[key].body["next_fire_at"].endswith(":00Z"), key  # on the minute
    assert kinds["at"].body["next_fire_at"] == kinds["at"].body["schedule"][3:-1] + "Z"
    first = seconds(kinds["rate"].body["next_fire_at"])
    # rate(5 seconds) counts from registration, rounded up to a whole second: it first fires
    # 5 s after that, whatever fraction of its second it was registered at
    assert kinds["rate"].sent_at + 5 <= first <= kinds["rate"].answered_at + 6


def test_local_resources_match_the_synthesised_template(local_mode: LocalMode) -> None:
    """Parity: the table and queues local mode created are the template's, setting by setting."""
    import boto3

    deployment = json.loads((local_mode.state / "run" / "deployment.json").read_text())
    template = json.loads(Path(deployment["template"]).read_text())
    resources = template["Resources"]
    session = boto3.session.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
    dynamodb = session.client("dynamodb", endpoint_url=local_mode.aws_url)
    sqs = session.client("sqs", endpoint_url=local_mode.aws_url)

    # The table: keys, attribute types, billing, TTL
    tables = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::DynamoDB::Table"]
    assert len(tables) == 1
    table = dynamodb.describe_table(TableName=deployment["table_name"])["Table"]
    assert table["KeySchema"] == tables[0]["KeySchema"]
    assert sorted(table["AttributeDefinitions"], key=str) == sorted(
        tables[0]["AttributeDefinitions"], key=str
    )
    assert table["BillingModeSummary"]["BillingMode"] == tables[0]["BillingMode"]
    assert len(table.get("GlobalSecondaryIndexes") or []) == len(tables[0].get("GlobalSecondaryIndexes", []))
    ttl = dynamodb.describe_time_to_live(TableName=deployment["table_name"])["TimeToLiveDescription"]
    assert ttl["TimeToLiveStatus"] == "ENABLED"
    assert ttl["AttributeName"] == tables[0]["TimeToLiveSpecification"]["AttributeName"]

    # The queues: pair each template queue with the local one in the same role
    env = next(
        r["Properties"]["Environment"]["Variables"]
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::Function"
        and "PUNCTUAL_TABLE_NAME" in (r["Properties"].get("Environment") or {}).get("Variables", {})
    )

    def refs(value: Any) -> list[str]:
        text = json.dumps(value)
        return re.findall(r'"Ref": "([^"]+)"', text)

    pairs = {}
    for variable, urls in (
        ("PUNCTUAL_SHORT_QUEUE_URLS", deployment["short_queue_urls"]),
        ("PUNCTUAL_LONG_QUEUE_URLS", deployment["long_queue_urls"]),
        ("PUNCTUAL_FAILED_QUEUE_URL", [deployment["failed_queue_url"]]),
    ):
        assert len(refs(env[variable])) == len(urls), variable
        pairs.update(dict(zip(refs(env[variable]), urls, strict=True)))
    compared = (
        "ContentBasedDeduplication",
        "DeduplicationScope",
        "FifoQueue",
        "FifoThroughputLimit",
        "VisibilityTimeout",
        "MessageRetentionPeriod",
        "DelaySeconds",
        "MaximumMessageSize",
        "ReceiveMessageWaitTimeSeconds",
    )
    arn_to_url = {arn: url for url, arn in deployment["queue_arns"].items()}
    for logical_id, url in list(pairs.items()):
        props = resources[logical_id]["Properties"]
        local = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        for name in compared:
            if name in props:
                expected = str(props[name]).lower() if isinstance(props[name], bool) else str(props[name])
                assert local.get(name) == expected, (logical_id, name)
        redrive = props.get("RedrivePolicy")
        if redrive:
            local_redrive = json.loads(local["RedrivePolicy"])
            assert int(local_redrive["maxReceiveCount"]) == redrive["maxReceiveCount"]
            dlq_id = redrive["deadLetterTargetArn"]["Fn::GetAtt"][0]
            pairs[dlq_id] = arn_to_url[local_redrive["deadLetterTargetArn"]]
            dlq_props = resources[dlq_id]["Properties"]
            dlq = sqs.get_queue_attributes(QueueUrl=pairs[dlq_id], AttributeNames=["All"])["Attributes"]
            for name in compared:
                if name in dlq_props:
                    value = dlq_props[name]
                    assert dlq.get(name) == (str(value).lower() if isinstance(value, bool) else str(value))
        else:
            assert "RedrivePolicy" not in local
    template_queues = [k for k, r in resources.items() if r["Type"] == "AWS::SQS::Queue"]
    assert sorted(pairs) == sorted(template_queues)  # every queue of the template, and no other
    assert len(sqs.list_queues()["QueueUrls"]) == len(template_queues)


# ------------------------------------------------------------------------------- CLI lifecycle


def test_cli_pause_resume_trigger_delete_and_history(
    local_mode: LocalMode, kinds: dict[str, Registered]
) -> None:
    local = local_mode
    reference = kinds["rate"].id

    def reference_slots_after(moment: float, count: int) -> bool:
        return len([s for s in succeeded_slots(local, reference) if seconds(s) > moment]) >= count

    # Given a rate(5 seconds) job created with the CLI
    code, job, err = local.cli(
        "jobs",
        "create",
        "--name",
        "cli lifecycle",
        "--schedule",
        "rate(5 seconds)",
        "--http-url",
        local.hook("life"),
        "--payload",
        json.dumps(PAYLOAD),
        "--tag",
        "suite=e2e",
    )
    assert code == 0, err
    life = job["id"]
    local.wait(lambda: succeeded_slots(local, life), 60, "the CLI job's first run")

    # When it is paused, Then no slot after the pause runs while the reference job keeps firing
    code, paused, err = local.cli("jobs", "pause", life)
    assert code == 0 and paused["state"] == "PAUSED", err
    paused_at = time.time()
    local.wait(lambda: reference_slots_after(paused_at, 2), 60, "two reference slots after the pause")
    assert [s for s in by_key(local, life) if seconds(s) > paused_at + 1] == []
    code, listed, err = local.cli("jobs", "list")
    assert code == 0 and any(j["id"] == life and j["state"] == "PAUSED" for j in listed["items"]), err

    # When it is resumed, Then it fires again
    code, resumed, err = local.cli("jobs", "resume", life)
    assert code == 0 and resumed["state"] == "ENABLED", err
    resumed_at = time.time()
    local.wait(
        lambda: [s for s in succeeded_slots(local, life) if seconds(s) >= resumed_at - 1],
        60,
        "a run after resume",
    )

    # When it is triggered by hand, Then that extra slot runs once and shows in its history
    code, accepted, err = local.cli("jobs", "trigger", life)
    assert code == 0 and "~" in accepted["slot"], err
    manual = accepted["slot"]
    local.wait(lambda: manual in succeeded_slots(local, life), 60, "the triggered run")

    def run_of(slot: str) -> dict[str, Any] | None:  # the receiver answers before the record is written
        code, run, err = local.cli("runs", "get", life, slot)
        assert code == 0, err
        return run if run["status"] == "SUCCEEDED" else None

    run = local.wait(lambda: run_of(manual), 30, "the triggered run's record")
    assert run["slot"] == manual and [a["attempt"] for a in run["attempts"]] == [1]
    answered = succeeded_slots(local, life)

    def listed() -> dict[str, str] | None:
        code, runs, err = local.cli("runs", "list", life, "--limit", "100")
        assert code == 0, err
        statuses = {r["slot"]: r["status"] for r in runs["items"]}
        return statuses if all(statuses.get(slot) == "SUCCEEDED" for slot in answered) else None

    local.wait(listed, 30, "the history to list every run the receiver answered")

    # When it is deleted, Then it is gone and nothing of it runs any more
    code, _, err = local.cli("jobs", "delete", life)
    assert code == 0, err
    deleted_at = time.time()
    code, _, err = local.cli("jobs", "get", life)
    assert code != 0 and ("404" in err or "not found" in err.lower()), err
    local.wait(lambda: reference_slots_after(deleted_at, 2), 60, "two reference slots after the delete")
    assert [s for s in by_key(local, life) if seconds(s) > deleted_at + 1] == []
    assert_each_attempt_once(local, life)


def test_pause_and_resume_over_plain_http(local_mode: LocalMode) -> None:
    local = local_mode
    job = register(local, "http-life", "rate(5 seconds)")
    status, paused = local.api("POST", f"/v1/jobs/{job.id}/pause")
    assert status == 200 and paused["state"] == "PAUSED" and paused["next_fire_at"] is None
    status, again = local.api("POST", f"/v1/jobs/{job.id}/pause")
    assert status == 200 and again["version"] == paused["version"]  # pausing a paused job changes nothing
    status, resumed = local.api("POST", f"/v1/jobs/{job.id}/resume")
    assert status == 200 and resumed["state"] == "ENABLED" and resumed["next_fire_at"]
    status, accepted = local.api("POST", f"/v1/jobs/{job.id}/trigger")
    assert status == 202
    local.wait(lambda: accepted["slot"] in succeeded_slots(local, job.id), 60, "the triggered run")
    status, _ = local.api("DELETE", f"/v1/jobs/{job.id}")
    assert status == 204
    assert local.api("GET", f"/v1/jobs/{job.id}")[0] == 404
    assert local.api("GET", f"/v1/jobs/{job.id}", tenant="someone-else")[0] == 404


# ------------------------------------------------------------------------------- on time, once


def test_every_kind_fires_on_time_and_each_slot_once(
    local_mode: LocalMode, kinds: dict[str, Registered]
) -> None:
    local = local_mode
    ids = {key: job.id for key, job in kinds.items()}

    def fired() -> bool:
        done = {key: succeeded_slots(local, job_id) for key, job_id in ids.items()}
        return (
            len(done["rate"]) >= 4
            and len(done["cron"]) >= 1
            and len(done["aws-cron"]) >= 1
            and len(done["at"]) == 1
            and len(done["delay"]) >= 2
            and len(done["ecs"]) >= 2
            and len(done["after"]) >= 1
        )

    local.wait(fired, 150, "every schedule kind to fire")

    # Time-based slots run on the schedule's instants, never before them, and in their own
    # minute: released by that minute's poller, not caught up by a later one (LATE_S is a
    # bound on a slow machine's delays, far under the minute a catch-up would take)
    for key in ("rate", "cron", "aws-cron", "at", "ecs"):
        seen = assert_each_attempt_once(local, ids[key])
        for slot, records in seen.items():
            first = min(r["arrived"] for r in records)
            assert first >= seconds(slot), f"{key} {slot} ran early"
            assert first - seconds(slot) < LATE_S, f"{key} {slot} ran {first - seconds(slot):.1f}s late"
    rate = expected_slots(kinds["rate"].body["next_fire_at"], 5, time.time() - SETTLE_S)
    local.wait(lambda: set(rate) <= set(succeeded_slots(local, ids["rate"])), 60, "every rate slot so far")
    for key in ("cron", "aws-cron"):
        assert all(slot.endswith(":00Z") for slot in succeeded_slots(local, ids[key])), key
    assert succeeded_slots(local, ids["at"]) == [kinds["at"].body["next_fire_at"]]
    local.wait(
        lambda: local.api("GET", f"/v1/jobs/{ids['at']}")[1]["state"] == "COMPLETED", 30, "at() to complete"
    )

    # delay(): each run starts 10 s after the previous one finished
    delay = by_key(local, ids["delay"])
    slots = sorted(delay)
    for previous, following in itertools.pairwise(slots):
        finished = max(r["answered"] for r in delay[previous])
        assert seconds(following) >= int(finished) + 10 - 1, (previous, following)

    # after(cron, aws-cron): a child slot only for a minute both parents succeeded, after both
    both = set(succeeded_slots(local, ids["cron"])) & set(succeeded_slots(local, ids["aws-cron"]))
    children = assert_each_attempt_once(local, ids["after"])
    assert children and set(children) <= both
    for slot, records in children.items():
        parent_done = max(
            r["answered"]
            for key in ("cron", "aws-cron")
            for r in by_key(local, ids[key])[slot]
            if r["status"] == 200
        )
        assert min(r["arrived"] for r in records) >= parent_done


# ------------------------------------------------------------------------------- crashes


def test_kill_9_a_worker_mid_run(local_mode: LocalMode, kinds: dict[str, Registered]) -> None:
    local = local_mode
    # Given a run that lasts 4 s (its receiver is slow), due in a few seconds
    due = (datetime.now(UTC) + timedelta(seconds=6)).strftime("%Y-%m-%dT%H:%M:%S")
    slow = register(local, "slow", f"at({due})", hook="slow?delay=4", timeout_seconds=8)

    def running_worker() -> str | None:
        pending = [r for r in local.records() if r.get("job") == slow.id and r["status"] is None]
        if not pending:
            return None
        for name in ("worker-1", "worker-2"):
            if any(m.get("job_id") == slow.id for m in local.inflight(name)):
                return name
        return None

    # When the worker process running it is killed -9 in the middle of the run
    name = local.wait(running_worker, 90, "the slow run to be in progress", interval_s=0.2)
    victim = local.pid(name)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    killed_at = time.time()

    # Then the supervisor restarts it, and the slot still succeeds: taken over as attempt 2
    local.wait(lambda: local.pid(name) not in (None, victim), 60, f"{name} to be restarted")
    assert re.search(rf"{name} \(pid {victim}\) killed by SIGKILL; restarting", local.log())

    def execution() -> dict[str, Any] | None:
        status, body = local.api("GET", f"/v1/jobs/{slow.id}/executions")
        items = body["items"] if status == 200 else []
        return items[0] if items and items[0]["status"] == "SUCCEEDED" else None

    done = local.wait(execution, 120, "the killed run to be taken over and succeed")
    attempts = {a["attempt"]: a["status"] for a in done["attempts"]}
    assert done["attempt"] >= 2 and attempts[1] == "TIMED_OUT" and attempts[done["attempt"]] == "SUCCEEDED"
    seen = assert_each_attempt_once(local, slow.id)
    assert list(seen) == [due + "Z"]
    assert sorted(r["attempt"] for r in seen[due + "Z"]) == list(range(1, done["attempt"] + 1))
    assert min(r["arrived"] for r in seen[due + "Z"] if r["attempt"] > 1) > killed_at


def test_kill_9_the_poller_mid_minute(local_mode: LocalMode, kinds: dict[str, Registered]) -> None:
    local = local_mode
    rate = kinds["rate"].id
    # Given the middle of a minute: not its first or last 10 s, when two minute-runs overlap
    local.wait(lambda: 12 <= datetime.now(UTC).second <= 48, 70, "the middle of a minute")
    victim = local.pid("poller")
    assert victim is not None

    # When the poller is killed -9
    os.kill(victim, signal.SIGKILL)
    killed_at = time.time()

    # Then the supervisor restarts it and the rate(5 seconds) job goes on, every slot once
    local.wait(lambda: local.pid("poller") not in (None, victim), 60, "the poller to be restarted")
    expected = expected_slots(first_slot(local, kinds["rate"]), 5, killed_at + 10)
    local.wait(
        lambda: set(expected) <= set(succeeded_slots(local, rate)),
        90,
        "every rate slot up to 10 s after the kill to have run",
    )
    # ... after the state machine's first retry delay (its catch-all retrier, read from the
    # template), not the supervisor's back-off
    assert re.search(rf"poller \(pid {victim}\) killed by SIGKILL; restarting in 1\.0s", local.log())
    assert re.search(r"retried as the state machine: .*States\.ALL up to 47x", local.log())
    # ... and the new poller resumed the killed minute from its progress mark, not from its start
    killed_minute = datetime.fromtimestamp(killed_at, UTC).strftime("%H:%M")
    assert re.search(rf"minute {killed_minute} group \d+/\d+ resumes from its progress mark", local.log())
    ran = succeeded_slots(local, rate)[: len(expected)]
    assert ran == expected, _off_schedule(local, kinds["rate"], ran, expected)  # no slot off the schedule
    assert_each_attempt_once(local, rate)


def _off_schedule(local: LocalMode, job: Registered, ran: list[str], expected: list[str]) -> str:
    """What to look at when a slot ran off the schedule: its requests, the job, its log lines."""
    off = sorted(set(ran) ^ set(expected))
    requests = {slot: by_key(local, job.id).get(slot) for slot in off}
    _, stored = local.api("GET", f"/v1/jobs/{job.id}")
    lines = [line for line in local.log().splitlines() if job.id in line][:20]
    return (
        f"slots off the schedule {off}; registered {job.sent_at:.3f}-{job.answered_at:.3f} as {job.body}; "
        f"their requests {requests}; now {stored}; log {lines}"
    )


# ------------------------------------------------------------------------------- after the crashes


def test_every_slot_ran_once_and_history_agrees(local_mode: LocalMode, kinds: dict[str, Registered]) -> None:
    local = local_mode
    cutoff = time.time() - SETTLE_S
    for key in ("rate", "ecs"):
        period = 5 if key == "rate" else 10
        job = kinds[key]
        expected = expected_slots(first_slot(local, job), period, cutoff)
        local.wait(
            lambda job=job, expected=expected: set(expected) <= set(succeeded_slots(local, job.id)),
            60,
            f"every due {key} slot to have run",
        )
    for key, job in kinds.items():
        answered = succeeded_slots(local, job.id)

        def recorded(job: Registered = job, answered: list[str] = answered) -> tuple[dict[str, Any]] | None:
            # the receiver answers a moment before the worker records the success (a job that
            # has not fired yet has an empty history: still a result, hence the tuple)
            runs = {run["slot"]: run for run in history(local, job.id)}
            return (runs,) if all(runs.get(s, {}).get("status") == "SUCCEEDED" for s in answered) else None

        (runs,) = local.wait(recorded, 30, f"the {key} history to record every answered run")
        seen = assert_each_attempt_once(local, job.id)
        for slot in answered:
            assert runs[slot]["attempt"] == max(r["attempt"] for r in seen[slot]), (key, slot)
        for slot, run in runs.items():  # and the history invents nothing the receiver did not see
            if run["status"] == "SUCCEEDED":
                assert slot in seen, (key, slot)


# ------------------------------------------------------------------------------- overlap


def runs_of(local: LocalMode, job_id: str) -> list[dict[str, Any]]:
    """The receiver's requests for one job, in arrival order."""
    return sorted((r for r in local.records() if r.get("job") == job_id), key=lambda r: r["arrived"])


def assert_never_two_at_once(runs: list[dict[str, Any]]) -> None:
    """Each request arrived after the one before it was answered (nothing concurrent)."""
    for before, after in itertools.pairwise(runs):
        assert before["answered"] is not None, before
        assert after["arrived"] >= before["answered"] - 0.05, (before, after)


def test_skip_and_queue_jobs_against_slow_targets_never_overlap_lose_nothing_keep_order(
    local_mode: LocalMode,
) -> None:
    local = local_mode
    # Given two jobs every 5 s whose targets take longer than that, one that skips and one
    # that queues (on the ECS lane, whose worker runs several executions at once)
    common: dict[str, Any] = {"runtime": "ecs", "timeout_seconds": 30}
    skip = register(local, "skip", "rate(5 seconds)", hook="skip?delay=8", overlap="skip", **common)
    queue = register(local, "queue", "rate(5 seconds)", hook="queue?delay=6", overlap="queue", **common)
    # When they fire for a minute (the queue job's backlog grows by a second a slot; the skip job
    # runs every other slot and skips the one between)
    local.wait(lambda: len(runs_of(local, skip.id)) >= 6 and len(runs_of(local, queue.id)) >= 10, 420, "runs")
    cutoff = time.time() - SETTLE_S
    # Then neither ever ran two slots at once, and no slot reached the receiver twice
    for job in (skip, queue):
        assert_never_two_at_once([r for r in runs_of(local, job.id) if r["answered"] is not None])
        assert_each_attempt_once(local, job.id)
    # And the queue job ran its slots in slot order, and every due slot is run or recorded
    # QUEUED behind the one running (none lost, none dead-lettered): on the ECS lane the
    # job's FIFO group already holds the next slot back while one runs
    slots = [r["slot"] for r in runs_of(local, queue.id)]
    assert slots == sorted(slots)
    due = expected_slots(queue.body["next_fire_at"], 5, cutoff)

    def all_recorded() -> dict[str, str] | None:
        recorded = {run["slot"]: run["status"] for run in history(local, queue.id)}
        ok = all(recorded.get(slot) in ("SUCCEEDED", "RUNNING", "QUEUED") for slot in due)
        return recorded if ok else None

    recorded = local.wait(all_recorded, 60, "every due slot of the queue job to be recorded")
    assert "SKIPPED" not in recorded.values()  # queued, late, but never dropped
    # And the skip job recorded every slot that fell inside a run as SKIPPED, naming the run
    skipped = [run for run in history(local, skip.id) if run["status"] == "SKIPPED"]
    assert len(skipped) >= 3 and all("had not finished" in (run.get("error") or "") for run in skipped)
    # (then both go, and their last runs end before the next test stops local mode)
    for job in (skip, queue):
        assert local.api("DELETE", f"/v1/jobs/{job.id}")[0] == 204

    def settled() -> bool:
        return all(r["answered"] is not None for job in (skip, queue) for r in runs_of(local, job.id))

    local.wait(settled, 60, "the slow runs to end")


def test_stop_is_clean_and_prints_one_summary_line(local_mode: LocalMode) -> None:
    local = local_mode
    names = ["aws", "api", "poller", "receiver", "ecs-worker", "worker-1", "worker-2", "auditor"]
    pids = {name: local.pid(name) for name in names}
    assert all(pids.values()), pids

    # When the supervisor gets SIGTERM (Ctrl-C works the same way)
    local.process.send_signal(signal.SIGTERM)
    local.wait(lambda: local.process.poll() is not None or None, 120, "local mode to stop")

    # Then it exits 0, every component is gone, and the demo's one summary line is last
    assert local.process.returncode == 0, local.tail()
    assert [name for name, pid in pids.items() if pid and alive(pid)] == []
    for name in names:
        assert re.search(rf"stopped {name} \(exit 0\)", local.log()), name
    last = local.log().strip().splitlines()[-1]
    match = re.fullmatch(
        r"punctual-local: \d+s demo, slots due (\d+), executed (\d+), duplicates (\d+), missed (\d+), "
        r"fire delay p50 (\d+) ms p99 (\d+) ms",
        last,
    )
    assert match, last
    due, executed, duplicates, missed = (int(match.group(i)) for i in range(1, 5))
    assert due > 0 and executed == due and duplicates == 0 and missed == 0
    assert not (local.state / "run" / "supervisor.pid").exists()
