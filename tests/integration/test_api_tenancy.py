"""Tenant isolation for every route, and where the tenant comes from (IAM caller; local header)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

import pytest
from api_harness import ACCOUNT, ALICE, ALICE_ID, BOB, ApiClient, Reply, job_spec
from api_harness import api as api  # the fixture

from punctual.admin.tenant_moves import move_jobs
from punctual.models import Execution, ExecutionStatus

SLOT = "2026-11-30T09:32:00Z"

# Every route that names a job, called by Bob on Alice's job.
FOREIGN_CALLS: dict[str, Callable[[ApiClient, str], Reply]] = {
    "GET job": lambda api, job: api.call("GET", f"/v1/jobs/{job}", user=BOB),
    "PUT job": lambda api, job: api.call("PUT", f"/v1/jobs/{job}", job_spec(name="mine now"), user=BOB),
    "PUT job with If-Match": lambda api, job: api.call(
        "PUT", f"/v1/jobs/{job}", job_spec(), {"If-Match": '"1"'}, user=BOB
    ),
    "DELETE job": lambda api, job: api.call("DELETE", f"/v1/jobs/{job}", user=BOB),
    "pause": lambda api, job: api.call("POST", f"/v1/jobs/{job}/pause", user=BOB),
    "resume": lambda api, job: api.call("POST", f"/v1/jobs/{job}/resume", user=BOB),
    "trigger": lambda api, job: api.call("POST", f"/v1/jobs/{job}/trigger", user=BOB),
    "trigger with key": lambda api, job: api.call(
        "POST", f"/v1/jobs/{job}/trigger", headers={"Idempotency-Key": "k"}, user=BOB
    ),
    "list executions": lambda api, job: api.call("GET", f"/v1/jobs/{job}/executions", user=BOB),
    "get execution": lambda api, job: api.call(
        "GET", f"/v1/jobs/{job}/executions/{quote(SLOT, safe='')}", user=BOB
    ),
}


@pytest.fixture
def alices_job(api: ApiClient) -> str:
    job_id: str = api.create(user=ALICE)["id"]
    api.store.save_execution(
        Execution(
            job_id=job_id,
            tenant=ALICE_ID,
            slot=SLOT,
            scheduled_at="2026-11-30T09:32:00Z",  # type: ignore[arg-type]
            status=ExecutionStatus.SUCCEEDED,
        ),
        None,
        ttl_epoch_s=2_000_000_000,
    )
    return job_id


@pytest.mark.parametrize("route", sorted(FOREIGN_CALLS))
def test_another_tenant_cannot_see_or_touch_a_job(api: ApiClient, alices_job: str, route: str) -> None:
    reply = FOREIGN_CALLS[route](api, alices_job)

    # Not 403: another tenant's job does not exist for the caller.
    assert reply.status == 404
    assert reply.problem["type"].endswith("not-found")
    mine = api.call("GET", f"/v1/jobs/{alices_job}", user=ALICE).body
    assert (mine["version"], mine["state"], mine["name"]) == (1, "ENABLED", "nightly report")
    assert [e["slot"] for e in api.call("GET", f"/v1/jobs/{alices_job}/executions").body["items"]] == [SLOT]
    assert api.queued() == []


def test_listing_shows_only_the_callers_jobs(api: ApiClient, alices_job: str) -> None:
    bobs = api.create(user=BOB)["id"]

    assert [j["id"] for j in api.call("GET", "/v1/jobs", user=ALICE).body["items"]] == [alices_job]
    assert [j["id"] for j in api.call("GET", "/v1/jobs", user=BOB).body["items"]] == [bobs]


def test_a_next_token_cannot_be_replayed_by_another_tenant(api: ApiClient) -> None:
    for _ in range(2):
        api.create(user=ALICE)
    api.create(user=BOB)
    token = api.call("GET", "/v1/jobs?limit=1", user=ALICE).body["next_token"]

    reply = api.call("GET", f"/v1/jobs?limit=1&next_token={quote(token)}", user=BOB)

    assert reply.status == 400
    assert reply.problem["type"].endswith("invalid-next-token")


def test_an_execution_token_cannot_be_replayed_by_another_tenant(api: ApiClient, alices_job: str) -> None:
    api.store.save_execution(
        Execution(
            job_id=alices_job,
            tenant=ALICE_ID,
            slot="2026-11-29T09:32:00Z",
            scheduled_at="2026-11-29T09:32:00Z",  # type: ignore[arg-type]
            status=ExecutionStatus.FAILED,
        ),
        None,
        ttl_epoch_s=2_000_000_000,
    )
    token = api.call("GET", f"/v1/jobs/{alices_job}/executions?limit=1").body["next_token"]
    bobs_job = api.create(user=BOB)["id"]

    reply = api.call("GET", f"/v1/jobs/{bobs_job}/executions?next_token={quote(token)}", user=BOB)

    assert reply.status == 400
    assert reply.problem["type"].endswith("invalid-next-token")


def test_sessions_of_one_role_share_a_tenant_and_other_roles_do_not(api: ApiClient) -> None:
    session_1 = f"arn:aws:sts::{ACCOUNT}:assumed-role/Scheduler/i-0abc"
    session_2 = f"arn:aws:sts::{ACCOUNT}:assumed-role/Scheduler/lambda-xyz"
    other_role = f"arn:aws:sts::{ACCOUNT}:assumed-role/Auditor/i-0abc"
    job = api.create(user=session_1)["id"]

    assert api.call("GET", f"/v1/jobs/{job}", user=session_2).status == 200
    assert api.call("GET", f"/v1/jobs/{job}", user=other_role).status == 404


def test_caller_without_identity_is_401(api: ApiClient) -> None:
    reply = api.call("GET", "/v1/jobs", user=None)

    assert reply.status == 401
    assert reply.problem["type"].endswith("unauthenticated")


def test_tenant_header_is_ignored_outside_local_mode(api: ApiClient, alices_job: str) -> None:
    reply = api.call("GET", f"/v1/jobs/{alices_job}", headers={"X-Punctual-Tenant": BOB}, user=ALICE)
    spoof = api.call("GET", f"/v1/jobs/{alices_job}", headers={"X-Punctual-Tenant": ALICE}, user=BOB)

    assert reply.status == 200
    assert spoof.status == 404


def test_local_mode_takes_the_tenant_from_the_header(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from punctual.api import wiring

    monkeypatch.setenv("PUNCTUAL_LOCAL_MODE", "1")
    wiring.use_services(None)
    team_a = {"X-Punctual-Tenant": "team-a"}
    job = api.call("POST", "/v1/jobs", job_spec(), team_a, user=None)

    assert job.status == 201
    assert api.call("GET", f"/v1/jobs/{job.body['id']}", headers=team_a, user=None).status == 200
    assert api.call("GET", f"/v1/jobs/{job.body['id']}", user=None).status == 404  # tenant "default"
    invalid = api.call("GET", "/v1/jobs", headers={"X-Punctual-Tenant": "a#b"}, user=None)
    assert invalid.status == 400


@pytest.mark.parametrize("blank", ["", "  "])
def test_local_mode_refuses_a_blank_tenant_header(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch, blank: str
) -> None:
    from punctual.api import wiring

    monkeypatch.setenv("PUNCTUAL_LOCAL_MODE", "1")
    wiring.use_services(None)
    # A script whose tenant variable was unset sends the header blank: not the default tenant's
    refused = api.call("POST", "/v1/jobs", job_spec(), {"X-Punctual-Tenant": blank}, user=None)

    assert refused.status == 400 and refused.fields() == ["header.X-Punctual-Tenant"]
    assert api.call("GET", "/v1/jobs", user=None).body["items"] == []  # nothing made for "default"


# --------------------------------------------------------------------------- identity (issue 16)


def test_the_tenant_is_the_principals_unique_id_not_its_arn(api: ApiClient) -> None:
    # Given a role whose jobs were registered by one of its sessions
    arn = f"arn:aws:sts::{ACCOUNT}:assumed-role/Scheduler/s-1"
    created = api.call("POST", "/v1/jobs", job_spec(), user=arn, caller="AROAOLDSCHEDULERROLE01:s-1")
    assert created.status == 201
    job = created.body["id"]
    stored = api.store.get_job("AROAOLDSCHEDULERROLE01", job)
    assert stored is not None  # stored under the role's id, not under a name or an ARN

    # When the role is deleted and created again under the same name (IAM gives it a new id)
    reply = api.call("GET", f"/v1/jobs/{job}", user=arn, caller="AROANEWSCHEDULERROLE02:s-1")

    # Then the new role does not inherit the old one's jobs
    assert reply.status == 404
    assert api.call("GET", "/v1/jobs", user=arn, caller="AROANEWSCHEDULERROLE02:s-9").body["items"] == []


@pytest.mark.parametrize(
    ("user", "tenant"),
    [
        ("AIDAJQABLZS4A3QDU576Q", "AIDAJQABLZS4A3QDU576Q"),  # an IAM user
        ("AROA3XFRBF535PLBIFPI4:lambda-xyz", "AROA3XFRBF535PLBIFPI4"),  # a session of a role
        ("123456789012", "123456789012"),  # the root
    ],
)
def test_each_kind_of_principal_maps_to_its_id(user: str, tenant: str) -> None:
    from punctual.api.tenancy import tenant_of

    event = {"requestContext": {"identity": {"user": user, "caller": user, "userArn": "arn:aws:iam::1:x"}}}
    assert tenant_of(event, local_mode=False) == tenant


@pytest.mark.parametrize(
    ("user", "caller"),
    [
        ("123456789012:bob", "123456789012:bob"),
        ("123456789012:AROA3XFRBF535PLBIFPI4", None),  # a chosen name that looks like a role id
        (None, "123456789012:alice"),
    ],
)
def test_a_federated_user_is_refused_not_given_the_name_it_chose(
    user: str | None, caller: str | None
) -> None:
    """Issue 31, point 5: GetFederationToken's caller chooses its name; it is no tenant (403)."""
    from punctual.api.problems import ApiProblem
    from punctual.api.tenancy import tenant_of

    arn = "arn:aws:sts::123456789012:federated-user/bob"
    event = {"requestContext": {"identity": {"user": user, "caller": caller, "userArn": arn}}}
    with pytest.raises(ApiProblem) as refused:
        tenant_of(event, local_mode=False)
    assert refused.value.status == 403
    assert "GetFederationToken" in refused.value.detail


def test_a_federated_user_gets_a_403_problem_from_the_api(api: ApiClient) -> None:
    reply = api.call(
        "GET", "/v1/jobs", user="arn:aws:sts::123456789012:federated-user/bob", caller="123456789012:bob"
    )

    assert reply.status == 403
    assert reply.problem["type"].endswith("federated-caller")
    scheduler = api.call("GET", "/schedules", user=None, caller="123456789012:bob")
    assert scheduler.status == 403


@pytest.mark.parametrize("user", ["arn:aws:iam::123456789012:user/alice", "alice", "", "AIDA!nope"])
def test_an_identity_without_a_unique_id_is_401(user: str) -> None:
    from punctual.api.problems import ApiProblem
    from punctual.api.tenancy import tenant_of

    event = {"requestContext": {"identity": {"user": user, "caller": None, "userArn": user}}}
    with pytest.raises(ApiProblem) as refused:
        tenant_of(event, local_mode=False)
    assert refused.value.status == 401


def test_jobs_registered_under_the_old_arn_identity_move_to_the_unique_id(api: ApiClient) -> None:
    from punctual.api import wiring
    from punctual.models import JobState

    # Given jobs stored under Alice's ARN (the tenant before issue 16): a paused one, a webhook
    # one, and a dependent one whose parent sorts after it
    jobs = wiring.services().jobs
    jobs.register(ALICE, job_spec_model(), "a-paused")
    jobs.pause(ALICE, "a-paused")
    _, old_secret = jobs.register(
        ALICE, job_spec_model(target={"type": "http", "url": "https://hooks.example.com/x"}), "b-hook"
    )
    jobs.register(ALICE, job_spec_model(), "z-parent")
    jobs.register(ALICE, job_spec_model(schedule="after(z-parent)"), "c-child")

    # When the operator moves them to her unique id
    report = move_jobs(jobs, ALICE, ALICE_ID)

    # Then she sees them all, in their states; nothing is left under the ARN
    assert sorted(report.moved) == ["a-paused", "b-hook", "c-child", "z-parent"]
    assert report.kept == []
    mine = {j["id"]: j["state"] for j in api.call("GET", "/v1/jobs").body["items"]}
    assert mine == {"a-paused": "PAUSED", "b-hook": "ENABLED", "c-child": "ENABLED", "z-parent": "ENABLED"}
    assert jobs.store.list_jobs(ALICE, 10).items == []
    # The webhook job has a new secret, bound to the new tenant
    assert set(report.secrets) == {"b-hook"} and report.secrets["b-hook"] != old_secret
    assert jobs.get(ALICE_ID, "a-paused").state is JobState.PAUSED


def test_a_move_keeps_a_job_the_new_tenant_already_has_another_of(api: ApiClient) -> None:
    from punctual.api import wiring

    # Given Alice's old-identity job "nightly", and another "nightly" she made under her new id
    jobs = wiring.services().jobs
    jobs.register(ALICE, job_spec_model(name="old nightly"), "nightly")
    jobs.register(ALICE_ID, job_spec_model(name="new nightly", schedule="cron(0 3 * * ? *)"), "nightly")

    # When the operator moves her jobs
    report = move_jobs(jobs, ALICE, ALICE_ID)

    # Then the old job is kept, with the reason, not deleted as if it had moved
    assert report.moved == [] and [job_id for job_id, _ in report.kept] == ["nightly"]
    assert "another job at this id" in report.kept[0][1]
    assert jobs.get(ALICE, "nightly").name == "old nightly"
    assert jobs.get(ALICE_ID, "nightly").name == "new nightly"


def test_a_move_run_again_after_a_crash_keeps_a_paused_job_paused(api: ApiClient) -> None:
    from punctual.api import wiring
    from punctual.models import JobState

    # Given a paused job whose copy a crashed move registered under the new id, enabled, and did
    # not pause yet
    jobs = wiring.services().jobs
    jobs.register(ALICE, job_spec_model(), "paused-one")
    jobs.pause(ALICE, "paused-one")
    jobs.register(ALICE_ID, job_spec_model(), "paused-one")

    # When the move runs again
    report = move_jobs(jobs, ALICE, ALICE_ID)

    # Then it finishes the move, and the job is paused, as it was
    assert report.moved == ["paused-one"]
    assert jobs.get(ALICE_ID, "paused-one").state is JobState.PAUSED
    assert jobs.store.get_job(ALICE, "paused-one") is None


def test_a_move_run_again_after_a_crash_hands_over_a_webhook_jobs_secret(api: ApiClient) -> None:
    from punctual.api import wiring
    from punctual.execution import default_signing_secrets
    from punctual.runtime.settings import Settings

    # Given a webhook job whose copy a crashed move registered under the new id: the copy's secret
    # was in the crashed run's report only, never handed to the tenant
    jobs = wiring.services().jobs
    hook = job_spec_model(target={"type": "http", "url": "https://hooks.example.com/x"})
    jobs.register(ALICE, hook, "hook")
    jobs.register(ALICE_ID, hook, "hook")

    # When the move runs again
    report = move_jobs(jobs, ALICE, ALICE_ID)

    # Then it finishes the move and reports a secret the moved job signs with (QA24: it reported
    # none, and every call was signed with a secret nobody had: 401 at a verifying receiver)
    assert report.moved == ["hook"] and jobs.store.get_job(ALICE, "hook") is None
    moved = jobs.get(ALICE_ID, "hook")
    assert report.secrets["hook"] in default_signing_secrets(Settings.from_env())(moved)


def test_a_move_run_again_leaves_the_secret_of_a_copy_that_calls_no_webhook(api: ApiClient) -> None:
    from punctual.api import wiring

    # Given a queue job, and its copy under the new id that once called a webhook (a replace keeps
    # the secret it had): nothing signs with that secret, so there is nothing to hand over
    jobs = wiring.services().jobs
    jobs.register(ALICE, job_spec_model(), "queued")
    jobs.register(
        ALICE_ID, job_spec_model(target={"type": "http", "url": "https://hooks.example.com/x"}), "queued"
    )
    jobs.replace(ALICE_ID, "queued", job_spec_model())

    report = move_jobs(jobs, ALICE, ALICE_ID)

    assert report.moved == ["queued"] and report.secrets == {}


def test_a_move_takes_the_tenants_schedule_groups_and_calendars_along(api: ApiClient) -> None:
    from datetime import UTC, datetime

    from punctual.api import wiring
    from punctual.api.scheduler.mapping import job_id_of
    from punctual.store.base import ScheduleGroup
    from punctual.usecases.calendars import Calendar

    # Given, under Alice's ARN, a schedule of her group "billing" and a job excluding her calendar
    jobs = wiring.services().jobs
    now = datetime.now(UTC)
    jobs.store.create_group(ScheduleGroup(ALICE, "billing", now, now, "ACTIVE", {"team": "data"}))
    jobs.store.put_calendar(
        Calendar(name="holidays", tenant=ALICE, dates=["2026-12-25"], created_at=now, updated_at=now), None
    )
    schedule = job_spec_model(tags={"punctual:schedule-group": "billing"})
    jobs.register(ALICE, schedule, job_id_of("billing", "invoices"))
    jobs.register(ALICE, job_spec_model(exclude_calendars=["holidays"]), "quiet-days")

    # When the operator moves her jobs
    report = move_jobs(jobs, ALICE, ALICE_ID)

    # Then both moved, and her group and calendar are hers under the new id too
    assert report.kept == [] and len(report.moved) == 2
    group = api.call("GET", "/schedule-groups/billing")
    assert group.status == 200 and group.body["Name"] == "billing"
    tags = api.call("GET", f"/tags/{quote(group.body['Arn'], safe='')}").body["Tags"]
    assert tags == [{"Key": "team", "Value": "data"}]
    assert api.call("GET", "/v1/calendars/holidays").body["dates"] == ["2026-12-25"]
    assert api.call("GET", "/v1/jobs/quiet-days").body["exclude_calendars"] == ["holidays"]


def test_a_move_keeps_a_job_excluding_a_calendar_the_new_tenant_has_with_other_days(api: ApiClient) -> None:
    from datetime import UTC, datetime

    from punctual.api import wiring
    from punctual.usecases.calendars import Calendar

    # Given Alice's old-identity calendar "holidays", and another "holidays" under her new id
    jobs = wiring.services().jobs
    now = datetime.now(UTC)
    for tenant, day in ((ALICE, "2026-12-25"), (ALICE_ID, "2026-12-31")):
        jobs.store.put_calendar(
            Calendar(name="holidays", tenant=tenant, dates=[day], created_at=now, updated_at=now), None
        )
    jobs.register(ALICE, job_spec_model(exclude_calendars=["holidays"]), "quiet-days")

    report = move_jobs(jobs, ALICE, ALICE_ID)

    # Then the job is not moved to pass over other days than its own; the new id's calendar stays
    assert report.moved == [] and [job_id for job_id, _ in report.kept] == ["quiet-days"]
    assert api.call("GET", "/v1/calendars/holidays").body["dates"] == ["2026-12-31"]
    assert jobs.get(ALICE, "quiet-days").exclude_calendars == ["holidays"]


@pytest.mark.parametrize(
    "to_tenant",
    [ALICE_ID, f"{ALICE_ID}\n", f" {ALICE_ID}", ""],
    ids=["the same tenant", "a trailing newline", "a leading space", "blank"],
)
def test_a_move_onto_the_same_tenant_or_no_tenant_is_refused_and_deletes_nothing(
    api: ApiClient, to_tenant: str
) -> None:
    from punctual.api import wiring

    # Given Alice's jobs under her unique id (already moved, or made there)
    jobs = wiring.services().jobs
    jobs.register(ALICE_ID, job_spec_model(), "nightly")
    jobs.register(
        ALICE_ID, job_spec_model(target={"type": "http", "url": "https://hooks.example.com/x"}), "hook"
    )

    # When an operator's script moves her jobs onto her own id, or onto an id no caller can be
    # (QA: onto itself, each job was "registered" (it was there) and then deleted: every job gone,
    # reported moved; onto `$(aws iam get-role ... --output text)` with its newline, out of reach)
    with pytest.raises(ValueError, match="to_tenant"):
        move_jobs(jobs, ALICE_ID, to_tenant)

    # Then nothing was moved nor deleted: she still has both jobs, as they were
    mine = {j["id"]: (j["state"], j["version"]) for j in api.call("GET", "/v1/jobs").body["items"]}
    assert mine == {"hook": ("ENABLED", 1), "nightly": ("ENABLED", 1)}
    if to_tenant != ALICE_ID:  # and nothing was written under the id that is no tenant
        assert jobs.store.list_jobs(to_tenant, 10).items == []


def job_spec_model(**overrides: object):  # type: ignore[no-untyped-def]
    from punctual.models import JobSpec

    return JobSpec.model_validate(job_spec(**overrides))
