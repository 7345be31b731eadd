"""The ``Custom::PunctualJob`` provider when something fails, against the job API under moto.

A failure after the job was made leaves no job behind; a webhook job's signing secret is stored
in the stack's Secrets Manager secret; a delete whose scheduler is gone succeeds while one that
may leave a job fails; every reason names the problem and the whole answer fits CloudFormation's
4096 bytes.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from api_harness import ACCOUNT, REGION, ApiClient, principal_id
from api_harness import api as api  # the fixture

from local.api_gateway import LocalApiServer
from punctual.execution import default_signing_secrets
from punctual.runtime.settings import Settings
from punctual_cdk.provider import handler as provider

STACK = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/orders/0a1b2c3d-aaaa-bbbb-cccc-000000000001"
ROLE = f"arn:aws:sts::{ACCOUNT}:assumed-role/orders-PunctualJobProviderRole/provider-session"
URL = "https://abc123defg.execute-api.us-east-1.amazonaws.com/prod"
OTHER_URL = "https://zyx987wvut.execute-api.us-east-1.amazonaws.com/prod"
QUEUE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders"
HOOK = {"type": "http", "url": "https://hooks.example.com/run"}
NO_SLEEP: Callable[[float], None] = lambda _: None  # noqa: E731


class FaultyApi:
    """The job API as the stack's provider role reaches it, with the answers ``faults`` names
    (``(method, path prefix)`` → status and body) put in place of the API's."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.faults: dict[tuple[str, str], tuple[int, Any]] = {}
        self.calls: list[tuple[str, str, int]] = []

    def __call__(self, url: str) -> FaultyApi:
        return self

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        for (fault_method, prefix), answer in self.faults.items():
            if method == fault_method and path.startswith(prefix):
                self.calls.append((method, path, answer[0]))
                return answer
        reply = self.api.call(method, path, body, headers=headers, user=ROLE)
        self.calls.append((method, path, reply.status))
        return reply.status, reply.body


def _spec(**overrides: Any) -> dict[str, Any]:
    target = {"type": "sqs", "queue_arn": QUEUE}
    return {"name": "nightly", "schedule": "cron(0 2 * * ? *)", "target": target, **overrides}


def _event(kind: str, request_id: str, spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    props = {"ServiceToken": "x", "ApiUrl": extra.pop("url", URL), "Spec": json.dumps(spec)}
    props |= extra.pop("props", {})
    return {
        "RequestType": kind,
        "ResponseURL": "https://cloudformation-custom-resource-response.example/presigned",
        "StackId": STACK,
        "RequestId": request_id,
        "LogicalResourceId": "NightlyJob",
        "ResourceType": provider.RESOURCE_TYPE,
        "ResourceProperties": props,
        **extra,
    }


def _live(api: ApiClient) -> list[str]:
    return [job["id"] for job in api.call("GET", "/v1/jobs", user=ROLE).body["items"]]


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What the provider tells CloudFormation (the PUTs to the ResponseURL), in order."""
    sent: list[dict[str, Any]] = []

    class _Answered:
        def __enter__(self) -> _Answered:
            return self

        def __exit__(self, *_: object) -> None:
            return None

    real = urllib.request.urlopen

    def urlopen(request: urllib.request.Request, timeout: float) -> Any:
        if not request.full_url.endswith("/presigned"):  # the API, as the provider calls it
            return real(request, timeout=timeout)
        raw: bytes = request.data  # type: ignore[assignment]
        sent.append({"bytes": len(raw), **json.loads(raw)})
        return _Answered()

    monkeypatch.setattr(provider.urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(provider, "RETRY_DELAYS_S", (0.0, 0.0))
    return sent


@pytest.fixture
def faulty(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> FaultyApi:
    through = FaultyApi(api)
    monkeypatch.setattr(provider, "SignedApi", through)
    return through


# --------------------------------------------------------------------------- finding 1: no orphan


def test_a_create_failing_after_its_put_deletes_its_job(
    api: ApiClient, faulty: FaultyApi, answers: list[dict[str, Any]]
) -> None:
    # Given an API whose schedule read fails (every attempt) after the job was created
    faulty.faults[("GET", "/schedules/")] = (500, {"Message": "internal"})
    provider.handler(_event("Create", "req-1", _spec()), None)
    # Then the create fails naming the job, which is deleted already
    (failed,) = answers
    job_id = failed["PhysicalResourceId"]
    assert failed["Status"] == "FAILED" and job_id.startswith("cfn-")
    assert f"job {job_id} was deleted" in failed["Reason"] and _live(api) == []
    # And the rollback's Delete of that id succeeds
    provider.handler(_event("Delete", "req-2", _spec(), PhysicalResourceId=job_id), None)
    assert answers[-1]["Status"] == "SUCCESS" and _live(api) == []


def test_a_create_whose_job_cannot_be_deleted_names_it_for_the_rollback(
    api: ApiClient, faulty: FaultyApi, answers: list[dict[str, Any]]
) -> None:
    # Given a read and a delete that both fail after the job was created (a throttled tenant)
    faulty.faults[("GET", "/schedules/")] = (429, {"title": "Too many requests"})
    faulty.faults[("DELETE", "/v1/jobs/")] = (429, {"title": "Too many requests"})
    provider.handler(_event("Create", "req-1", _spec()), None)
    (failed,) = answers
    job_id = failed["PhysicalResourceId"]
    # Then the failure names the job (not failed-<RequestId>): it is still there
    assert failed["Status"] == "FAILED" and _live(api) == [job_id]
    assert "could not be deleted" in failed["Reason"] and "Too many requests" in failed["Reason"]
    # And the rollback's Delete, once the API answers, deletes it
    faulty.faults.clear()
    provider.handler(_event("Delete", "req-2", _spec(), PhysicalResourceId=job_id), None)
    assert answers[-1]["Status"] == "SUCCESS" and _live(api) == []


def test_a_replacement_failing_after_its_put_deletes_the_new_job(
    api: ApiClient, faulty: FaultyApi, answers: list[dict[str, Any]]
) -> None:
    provider.handler(_event("Create", "req-1", _spec()), None)
    old_id = answers[0]["PhysicalResourceId"]
    # When a move to another deployment fails once its new job exists
    faulty.faults[("GET", "/schedules/")] = (503, None)
    replace = _event(
        "Update",
        "req-2",
        _spec(),
        url=OTHER_URL,
        PhysicalResourceId=old_id,
        OldResourceProperties={"ApiUrl": URL, "Spec": json.dumps(_spec())},
    )
    provider.handler(replace, None)
    # Then the update fails, still naming the old job, and only the old job is left
    assert answers[-1]["Status"] == "FAILED" and answers[-1]["PhysicalResourceId"] == old_id
    assert "(no body)" in answers[-1]["Reason"] and _live(api) == [old_id]


def test_a_spec_naming_another_schedule_makes_a_plain_job_with_its_own_arn(
    api: ApiClient, faulty: FaultyApi
) -> None:
    """A spec that carries an EventBridge schedule's identity (a GET body of that schedule's job,
    pasted into the template) does not make the resource's job that schedule: a schedule is its own
    job's (QA21: it was a second team/nightly in ListSchedules, which GetSchedule did not reach).
    The job is a plain one, and its ARN is its own, read from /schedules."""
    arn = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/team/nightly"
    identity = {"group": "team", "name": "nightly", "arn": arn, "target_arn": QUEUE}
    created = provider.on_event(_event("Create", "req-1", _spec(scheduler=identity)), faulty)
    job_id = created["PhysicalResourceId"]
    own = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/default/{job_id}"
    assert created["Data"]["Arn"] == own and _live(api) == [job_id]
    assert [method for method, _, _ in faulty.calls] == ["PUT", "GET"]


# --------------------------------------------------------------------------- finding 2: the secret


@pytest.fixture
def secret_arn(api: ApiClient) -> str:
    client = boto3.client("secretsmanager", region_name=REGION)
    arn: str = client.create_secret(Name="orders-NightlyJob-signing", SecretString="placeholder")["ARN"]
    return arn


def _stored(secret_arn: str) -> str:
    value: str = boto3.client("secretsmanager", region_name=REGION).get_secret_value(SecretId=secret_arn)[
        "SecretString"
    ]
    return value


def _signing(api: ApiClient, job_id: str) -> tuple[str, ...]:
    job = api.store.get_job(principal_id(ROLE).split(":")[0], job_id)
    return default_signing_secrets(Settings.from_env())(job)


def test_a_webhook_jobs_signing_secret_is_stored_in_its_secret(
    api: ApiClient, faulty: FaultyApi, secret_arn: str
) -> None:
    props = {"SigningSecretArn": secret_arn}
    # When a webhook job is created with a secret to keep its signing secret in
    created = provider.on_event(_event("Create", "req-1", _spec(target=HOOK), props=props), faulty)
    job_id = created["PhysicalResourceId"]
    # Then the secret holds the job's signing secret (the one the create's reply showed), never an output
    assert _stored(secret_arn).startswith("whsec_") and _signing(api, job_id) == (_stored(secret_arn),)
    assert "whsec_" not in json.dumps(created)
    # And a repeated delivery (the create's reply gone) stores a new one that signs, by a rotation
    first = _stored(secret_arn)
    assert provider.on_event(_event("Create", "req-1", _spec(target=HOOK), props=props), faulty) == created
    assert _stored(secret_arn) != first and _signing(api, job_id)[0] == _stored(secret_arn)
    # And an update that makes another job a webhook job stores its secret too
    other = provider.on_event(_event("Create", "req-2", _spec(), props=props), faulty)["PhysicalResourceId"]
    update = _event(
        "Update",
        "req-3",
        _spec(target=HOOK),
        props=props,
        PhysicalResourceId=other,
        OldResourceProperties={"ApiUrl": URL, "Spec": json.dumps(_spec()), **props},
    )
    provider.on_event(update, faulty)
    assert _signing(api, other)[0] == _stored(secret_arn)


def test_a_secret_named_by_its_name_keeps_the_signing_secret(
    api: ApiClient, faulty: FaultyApi, secret_arn: str
) -> None:
    """QA28: SigningSecretArn given as the secret's name (which PutSecretValue takes, and a
    template's parameter may hold) failed the create with "list index out of range": the region
    was read from the ARN's fourth field."""
    props = {"SigningSecretArn": "orders-NightlyJob-signing"}
    created = provider.on_event(_event("Create", "req-1", _spec(target=HOOK), props=props), faulty)
    assert _signing(api, created["PhysicalResourceId"]) == (_stored(secret_arn),)


# --------------------------------------------------------------------------- finding 3: API gone


def _unreachable(reason: OSError) -> Callable[[str], Any]:
    class Gone:
        def __init__(self, url: str) -> None:
            self.attempts = 0

        def request(self, *_: Any, **__: Any) -> tuple[int, Any]:
            raise urllib.error.URLError(reason)

    return Gone


JOB = "cfn-" + "a" * 40


@pytest.mark.parametrize(
    "reason",
    [
        ConnectionRefusedError(111, "Connection refused"),
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
    ],
    ids=["refused", "no-such-host"],
)
def test_a_delete_whose_scheduler_is_gone_succeeds_saying_so(reason: OSError) -> None:
    waits: list[float] = []
    event = _event("Delete", "req-1", _spec(), PhysicalResourceId=JOB)
    done = provider.on_event(event, _unreachable(reason), sleep=waits.append)
    # Then, after tries with backoff, the job is taken as gone with its scheduler
    assert done["PhysicalResourceId"] == JOB and "taken as deleted with its scheduler" in done["Reason"]
    assert waits == list(provider.RETRY_DELAYS_S[: len(waits)]) and len(waits) >= 2


def test_a_delete_the_real_api_cannot_reach_succeeds(answers: list[dict[str, Any]]) -> None:
    # The provider's own client against a port nobody listens on (connection refused)
    provider.handler(
        _event("Delete", "req-1", _spec(), url="http://127.0.0.1:9/prod", PhysicalResourceId=JOB), None
    )
    assert answers[-1]["Status"] == "SUCCESS" and "refuses connections" in answers[-1]["Reason"]


@pytest.mark.parametrize(
    "answer",
    [
        (503, {"message": "Service Unavailable"}),
        (429, {"title": "Too many requests"}),
        (
            403,
            {
                "Message": "User: arn:aws:sts::1:assumed-role/x is not authorized to perform: execute-api:Invoke"
            },
        ),
        (409, {"title": "Conflict", "detail": "job is the parent of after(...) jobs: cfn-child"}),
        (403, {"message": "Forbidden by the API's web ACL (AWS WAF)"}),  # the API's WAF_FILTERED (QA28)
    ],
    ids=["5xx", "throttled", "iam-refusal", "a-parent", "waf-blocked"],
)
def test_a_delete_that_may_leave_the_job_fails_naming_why(answer: tuple[int, Any]) -> None:
    class Answers:
        def __init__(self, url: str) -> None:
            pass

        def request(self, *_: Any, **__: Any) -> tuple[int, Any]:
            return answer

    with pytest.raises(provider.ProviderError) as failed:
        provider.on_event(_event("Delete", "req-1", _spec(), PhysicalResourceId=JOB), Answers, sleep=NO_SLEEP)
    said = (
        answer[1].get("detail") or answer[1].get("Message") or answer[1].get("message") or answer[1]["title"]
    )
    assert f"answered {answer[0]}: {said}" in str(failed.value)


def test_a_delete_of_a_deleted_api_gateway_api_succeeds() -> None:
    class DeletedApi:  # API Gateway's answer for an API id it does not have
        def __init__(self, url: str) -> None:
            pass

        def request(self, *_: Any, **__: Any) -> tuple[int, Any]:
            return 403, {"message": "Forbidden"}

    done = provider.on_event(_event("Delete", "req-1", _spec(), PhysicalResourceId=JOB), DeletedApi)
    assert "taken as deleted" in done["Reason"]


# --------------------------------------------------------------------------- findings 8, 9, 12


def test_a_schedules_message_is_the_reason(faulty: FaultyApi, answers: list[dict[str, Any]]) -> None:
    faulty.faults[("GET", "/schedules/")] = (404, {"Message": "Schedule cfn-x does not exist."})
    provider.handler(_event("Create", "req-1", _spec()), None)
    assert "answered 404: Schedule cfn-x does not exist." in answers[-1]["Reason"]


@pytest.mark.parametrize(
    "bad",
    [
        {"ä" * 600: 1},
        {"description": "€" * 5000},
        {"target": {"type": "http", "url": "https://x.example/" + "ö" * 900}},
    ],
    ids=["unknown-field", "description", "url"],
)
def test_the_whole_answer_fits_4096_bytes(
    faulty: FaultyApi, answers: list[dict[str, Any]], bad: dict[str, Any]
) -> None:
    event = _event("Create", "2b1c7f1e-5a8d-4c1e-9f00-0123456789ab", _spec(**bad))
    event["LogicalResourceId"] = "L" * 255  # CloudFormation's longest
    provider.handler(event, None)
    assert answers[-1]["Status"] == "FAILED" and answers[-1]["bytes"] <= provider.MAX_RESPONSE_BYTES
    assert answers[-1]["Reason"].startswith("ProviderError: creating the job: the job API answered 4")


def test_an_api_url_with_a_trailing_slash_is_the_same_deployment(api: ApiClient, faulty: FaultyApi) -> None:
    job_id = provider.on_event(_event("Create", "req-1", _spec()), faulty)["PhysicalResourceId"]
    update = _event(
        "Update",
        "req-2",
        _spec(schedule="rate(1 hour)"),
        url=URL + "/",
        PhysicalResourceId=job_id,
        OldResourceProperties={"ApiUrl": URL, "Spec": json.dumps(_spec())},
    )
    assert provider.on_event(update, faulty)["PhysicalResourceId"] == job_id  # updated in place
    assert _live(api) == [job_id]


@pytest.mark.parametrize(
    "url",
    ["abc123defg.execute-api.us-east-1.amazonaws.com/prod", "ftp://abc123defg.example/prod", "https://"],
)
@pytest.mark.parametrize("resource", [provider.RESOURCE_TYPE, provider.CALENDAR_RESOURCE_TYPE])
def test_an_api_url_that_is_no_url_is_refused_naming_it(
    answers: list[dict[str, Any]], url: str, resource: str
) -> None:
    # QA23: an ApiUrl without its scheme failed with "AttributeError: 'NoneType' object has no
    # attribute 'split'" (from deep inside the request's signing), naming neither ApiUrl nor the value
    event = _event("Create", "req-1", _spec(), url=url) | {"ResourceType": resource}
    provider.handler(event, None)
    assert answers[-1]["Status"] == "FAILED"
    assert answers[-1]["Reason"] == (
        f"ProviderError: ApiUrl: the Punctual stack's ApiUrl output (https://<api id>.execute-api"
        f".<region>.amazonaws.com/<stage>), not {url!r}"
    )


@pytest.mark.parametrize("around", ["\n", " ", "\t"])
def test_an_api_url_with_a_space_around_it_is_the_api_and_one_inside_is_refused(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch, around: str
) -> None:
    # QA26: a trailing space or newline (a parameter typed so, a !Sub | block) was sent as part of
    # every request's URL: the create failed "no answer" after its retries, saying the job may have
    # been made, and the rollback's Delete failed the same way: the stack stuck in DELETE_FAILED
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "provider-role-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "provider-role-secret")
    identity = {
        "userArn": ROLE,
        "user": principal_id(ROLE),
        "caller": principal_id(ROLE),
        "accountId": ACCOUNT,
    }
    with LocalApiServer(api.handler.handler, identity=identity) as server:
        url = server.url + "/" + around
        created = provider.on_event(
            _event("Create", "req-1", _spec(), url=url), provider.SignedApi, sleep=NO_SLEEP
        )
        assert _live(api) == [created["PhysicalResourceId"]]
        delete = _event("Delete", "req-2", _spec(), url=url, PhysicalResourceId=created["PhysicalResourceId"])
        assert "Reason" not in provider.on_event(delete, provider.SignedApi, sleep=NO_SLEEP)
        assert _live(api) == []
        # one inside the URL is refused naming ApiUrl, before anything is sent
        inside = server.url + around + "prod"
        with pytest.raises(provider.ProviderError, match=r"^ApiUrl: the Punctual stack's ApiUrl output"):
            provider.on_event(
                _event("Create", "req-3", _spec(), url=inside), provider.SignedApi, sleep=NO_SLEEP
            )
        assert _live(api) == []
