"""The ``Custom::PunctualJob`` provider against CloudFormation's rollbacks, slow or torn answers
and property mistakes (QA21), against the job API under moto.

A rollback is an Update of the same physical id with the old properties back: it is in place when
the job lives at that API (read from the job's id), never a second job; it succeeds whatever the
failed update's properties were. Every call (the API's, Secrets Manager's) ends within the
function's time, so CloudFormation always gets an answer; an answer that may have made a job names
it; unknown properties, and a Spec's ``state``, are refused naming them.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from api_harness import ACCOUNT, REGION, ApiClient
from api_harness import api as api  # the fixture

from punctual.api.schemas import OUTPUT_ONLY_FIELDS
from punctual_cdk.provider import handler as provider

STACK = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/orders/0a1b2c3d-aaaa-bbbb-cccc-000000000001"
ROLE = f"arn:aws:sts::{ACCOUNT}:assumed-role/orders-PunctualJobProviderRole/provider-session"
URL = "https://abc123defg.execute-api.us-east-1.amazonaws.com/prod"
OTHER_URL = "https://zyx987wvut.execute-api.us-east-1.amazonaws.com/prod"
QUEUE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders"
HOOK = {"type": "http", "url": "https://hooks.example.com/run"}
SECRET = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:orders-NightlyJob-signing-AbCdEf"
IAM_REFUSAL = (403, {"Message": "User: x is not authorized to perform: execute-api:Invoke"})
Fault = Callable[[str, str, Any, Any, Callable[..., tuple[int, Any]]], tuple[int, Any]]


class RoleApi:
    """The job API as the stack's provider role reaches it, with ``faults``: (method, path prefix,
    the URL it applies to or None) → a callable given the request and the real API."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.url = ""
        self.faults: list[tuple[str, str, str | None, Fault]] = []
        self.calls: list[tuple[str, str, str]] = []

    def __call__(self, url: str) -> RoleApi:
        self.url = url
        return self

    def real(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        reply = self.api.call(method, path, body, headers=headers, user=ROLE)
        return reply.status, reply.body

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        self.calls.append((self.url, method, path))
        for fault_method, prefix, url, fault in self.faults:
            if fault_method == method and path.startswith(prefix) and url in (None, self.url):
                return fault(method, path, body, headers, self.real)
        return self.real(method, path, body, headers)


def _spec(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "nightly",
        "schedule": "cron(0 2 * * ? *)",
        "target": {"type": "sqs", "queue_arn": QUEUE},
        **overrides,
    }


def _props(spec: Any, url: str = URL, **more: Any) -> dict[str, Any]:
    return {
        "ServiceToken": "x",
        "ApiUrl": url,
        "Spec": spec if isinstance(spec, str) else json.dumps(spec),
        **more,
    }


def _event(
    kind: str, request_id: str, spec: Any, *, url: str = URL, props: Any = None, **extra: Any
) -> dict[str, Any]:
    return {
        "RequestType": kind,
        "ResponseURL": "https://cloudformation-custom-resource-response.example/presigned",
        "StackId": STACK,
        "RequestId": request_id,
        "LogicalResourceId": "NightlyJob",
        "ResourceType": provider.RESOURCE_TYPE,
        "ResourceProperties": _props(spec, url, **(props or {})),
        **extra,
    }


def _live(api: ApiClient) -> list[str]:
    return [job["id"] for job in api.call("GET", "/v1/jobs", user=ROLE).body["items"]]


class _Answered:
    """What urlopen returns for the answer's PUT (read as a context manager)."""

    def __enter__(self) -> _Answered:
        return self

    def __exit__(self, *_: object) -> None:
        return None


@pytest.fixture
def role(api: ApiClient) -> RoleApi:
    return RoleApi(api)


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch, role: RoleApi) -> list[dict[str, Any]]:
    """What handler() tells CloudFormation (the PUTs to the ResponseURL); the API is ``role``."""
    sent: list[dict[str, Any]] = []

    def urlopen(request: urllib.request.Request, timeout: float) -> _Answered:
        assert request.full_url.endswith("/presigned")
        sent.append(json.loads(request.data))  # type: ignore[arg-type]
        return _Answered()

    monkeypatch.setattr(provider.urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(provider, "RETRY_DELAYS_S", (0.0, 0.0))
    monkeypatch.setattr(provider, "SignedApi", role)
    return sent


def _torn(
    method: str, path: str, body: Any, headers: Any, real: Callable[..., tuple[int, Any]]
) -> tuple[int, Any]:
    real(method, path, body, headers)  # the API did it
    raise http.client.IncompleteRead(b'{"id"')  # and its reply was cut mid-body


# ------------------------------------------------------------ 1. the rollback of a failed move


def _another_deployment(role: RoleApi, url: str = OTHER_URL) -> None:
    """``url`` is another deployment's API (the tests' one table stands for both): a job is found
    there only when it was made there (its id names that API)."""

    def elsewhere(method: str, path: str, body: Any, headers: Any, real: Any) -> tuple[int, Any]:
        if path.endswith(provider.api_tag(url)):
            return real(method, path, body, headers)  # type: ignore[no-any-return]
        return 404, {"title": "Not found", "detail": "no such job in this deployment"}

    role.faults.append(("GET", "/v1/jobs/", url, elsewhere))


def test_the_rollback_of_a_failed_move_updates_the_one_job_in_place(api: ApiClient, role: RoleApi) -> None:
    old_id = provider.on_event(_event("Create", "req-1", _spec()), role)["PhysicalResourceId"]
    _another_deployment(role)
    # When a move to another deployment fails there (an IAM refusal of the new API)
    role.faults.append(("PUT", "/v1/jobs/", OTHER_URL, lambda *_: IAM_REFUSAL))
    move = _event(
        "Update",
        "req-2",
        _spec(),
        url=OTHER_URL,
        PhysicalResourceId=old_id,
        OldResourceProperties=_props(_spec()),
    )
    with pytest.raises(provider.ProviderError, match="403"):
        provider.on_event(move, role)
    # Then its rollback (the old properties back, the failed ones as old) is in place at the job's API
    rollback = _event(
        "Update",
        "req-3",
        _spec(),
        PhysicalResourceId=old_id,
        OldResourceProperties=_props(_spec(), OTHER_URL),
    )
    assert provider.on_event(rollback, role)["PhysicalResourceId"] == old_id
    assert _live(api) == [old_id] and role.url == URL
    # And a move that succeeds is still a replacement: a new job at the new API
    role.faults = [fault for fault in role.faults if fault[0] != "PUT"]  # (the other deployment stays)
    new_id = provider.on_event(move | {"RequestId": "req-4"}, role)["PhysicalResourceId"]
    assert new_id != old_id and sorted(_live(api)) == sorted([old_id, new_id])
    assert new_id.endswith(provider.api_tag(OTHER_URL)) and old_id.endswith(provider.api_tag(URL))


def test_the_rollback_of_a_failed_move_of_a_job_made_before_ids_named_their_api(
    api: ApiClient, role: RoleApi
) -> None:
    legacy = "cfn-" + "0123456789" * 4  # made by an earlier provider: its id names no API
    assert role.real("PUT", f"/v1/jobs/{legacy}", _spec(), {"If-None-Match": "*"})[0] == 201
    rollback = _event(
        "Update",
        "req-3",
        _spec(),
        PhysicalResourceId=legacy,
        OldResourceProperties=_props(_spec(), OTHER_URL),
    )
    # The job found at the rollback's API is the resource's: updated in place
    assert provider.on_event(rollback, role)["PhysicalResourceId"] == legacy and _live(api) == [legacy]


# ------------------------------------------------------------ 2. rollbacks of refused properties


@pytest.mark.parametrize("bad", ["maybe", "yes", "off"])
def test_the_rollback_of_an_update_refused_for_its_enabled_succeeds(
    api: ApiClient, role: RoleApi, bad: str
) -> None:
    job_id = provider.on_event(_event("Create", "r1", _spec()), role)["PhysicalResourceId"]
    update = _event(
        "Update",
        "r2",
        _spec(),
        props={"Enabled": bad},
        PhysicalResourceId=job_id,
        OldResourceProperties=_props(_spec()),
    )
    with pytest.raises(provider.ProviderError, match="Enabled"):
        provider.on_event(update, role)
    rollback = _event(
        "Update", "r3", _spec(), PhysicalResourceId=job_id, OldResourceProperties=_props(_spec(), Enabled=bad)
    )
    assert provider.on_event(rollback, role)["PhysicalResourceId"] == job_id
    [job] = api.call("GET", "/v1/jobs", user=ROLE).body["items"]
    assert job["id"] == job_id and job["state"] == "ENABLED"


def test_a_spec_nested_too_deeply_fails_with_a_reason_and_its_rollback_succeeds(
    api: ApiClient, role: RoleApi, answers: list[dict[str, Any]]
) -> None:
    provider.handler(_event("Create", "r1", _spec()), None)
    job_id = answers[-1]["PhysicalResourceId"]
    deep = '{"name": "x", "payload": ' + "[" * 100_000 + "]" * 100_000 + "}"
    provider.handler(
        _event("Update", "r2", deep, PhysicalResourceId=job_id, OldResourceProperties=_props(_spec())), None
    )
    assert (
        answers[-1]["Status"] == "FAILED"
        and answers[-1]["Reason"] == "ProviderError: Spec: nested too deeply"
    )
    rollback = _event("Update", "r3", _spec(), PhysicalResourceId=job_id, OldResourceProperties=_props(deep))
    provider.handler(rollback, None)
    assert answers[-1]["Status"] == "SUCCESS" and answers[-1]["PhysicalResourceId"] == job_id
    assert _live(api) == [job_id]


# ------------------------------------------------------------ 3, 4. within the function's time


class MadeApi:
    """An API that makes the job at once (201, its signing secret and schedule ARN)."""

    calls: list[tuple[str, str]] = []

    def __init__(self, url: str) -> None:
        pass

    def request(self, method: str, path: str, body: Any = None, headers: Any = None) -> tuple[int, Any]:
        self.calls.append((method, path))
        if method == "PUT":
            arn = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/default/x"
            return 201, {
                "id": path.rsplit("/", 1)[-1],
                "signing_secret": "whsec_x",
                "scheduler": {"arn": arn},
            }
        return 204, None


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel does) and never answers."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        yield silent.getsockname()[1]


def _handled(event: dict[str, Any], left_s: float, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """handler() with ``left_s`` of the function's time, in a thread: the answers, once it ends.
    Waited for generously: on a busy machine the bounded calls take longer than their bound in
    wall time (the bounds themselves are checked on a simulated clock:
    test_every_attempt_ends_by_the_deadline)."""
    got: list[dict[str, Any]] = []
    monkeypatch.setattr(
        provider,
        "respond",
        lambda ev, status, outcome, reason="": got.append({"Status": status, "Reason": reason, **outcome}),
    )
    context = SimpleNamespace(get_remaining_time_in_millis=lambda: int(left_s * 1000))
    worker = threading.Thread(target=provider.handler, args=(event, context), daemon=True)
    worker.start()
    worker.join(timeout=left_s + 50)
    return got


@pytest.mark.timeout(120)
def test_a_silent_secrets_manager_is_answered_failed_within_the_functions_time(
    monkeypatch: pytest.MonkeyPatch, silent_port: int
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", f"http://127.0.0.1:{silent_port}")
    monkeypatch.setattr(provider, "SignedApi", MadeApi)
    MadeApi.calls = []
    event = _event("Create", "r1", _spec(target=HOOK), props={"SigningSecretArn": SECRET})
    # 12 s of the function's time past the answer's margin: the secret's call takes half of what
    # is left, the job's delete the rest (5 s failed about once in four runs on a loaded machine:
    # the client's making took the time the delete needed)
    got = _handled(event, provider.ANSWER_MARGIN_S + 12, monkeypatch)
    # Then the answer is FAILED, naming the secret (not left to CloudFormation's hour-long timeout)
    assert got and got[0]["Status"] == "FAILED" and SECRET in got[0]["Reason"]
    # And the job made before it is deleted, and named (the rollback's Delete reaches it anyway)
    job_id = provider.job_id_for(event)
    assert got[0]["PhysicalResourceId"] == job_id and ("DELETE", f"/v1/jobs/{job_id}") in MadeApi.calls


@pytest.mark.timeout(120)
def test_a_silent_api_is_answered_within_the_functions_time(
    monkeypatch: pytest.MonkeyPatch, silent_port: int
) -> None:
    # The provider's own client against an API that accepts connections and never answers
    event = _event("Create", "r1", _spec(), url=f"http://127.0.0.1:{silent_port}/prod")
    got = _handled(event, provider.ANSWER_MARGIN_S + 5, monkeypatch)
    assert got and got[0]["Status"] == "FAILED" and "no answer" in got[0]["Reason"]
    # The job may have been made: the answer names it, so the rollback's Delete reaches it
    assert got[0]["PhysicalResourceId"] == provider.job_id_for(event)


def test_every_attempt_ends_by_the_deadline() -> None:
    """A simulated clock: every attempt takes the whole time it is given (no answer)."""
    now = [0.0]
    given: list[float] = []

    class Slow:
        def bound(self, seconds: float) -> None:
            given.append(seconds)

        def request(self, *_: Any) -> tuple[int, Any]:
            now[0] += given[-1]
            raise TimeoutError("timed out")

    def sleep(seconds: float) -> None:
        now[0] += seconds

    retrying = provider.Retrying(Slow(), deadline=33.0, sleep=sleep, clock=lambda: now[0])
    with pytest.raises(provider.ApiUnreachableError) as failed:
        retrying.request("PUT", "/v1/jobs/x")
    assert now[0] <= 33.0 and given[0] == provider.HTTP_TIMEOUT_S and len(given) >= 2
    assert min(given) >= provider.MIN_ATTEMPT_S and not failed.value.gone
    # And a request with no time left is not sent: a Delete is not taken as done for it
    with pytest.raises(provider.ApiUnreachableError, match="time is up") as late:
        retrying.request("DELETE", "/v1/jobs/x")
    assert not late.value.gone


# ------------------------------------------------------------ 5. a torn reply


def test_a_torn_reply_to_the_create_names_its_job_for_the_rollback(
    api: ApiClient, role: RoleApi, answers: list[dict[str, Any]]
) -> None:
    role.faults.append(("PUT", "/v1/jobs/", None, _torn))
    provider.handler(_event("Create", "req-1", _spec()), None)
    failed = answers[-1]
    assert failed["Status"] == "FAILED" and failed["PhysicalResourceId"] == provider.job_id_for(
        _event("Create", "req-1", _spec())
    )
    assert "IncompleteRead" in failed["Reason"] and _live(api) == [failed["PhysicalResourceId"]]
    role.faults.clear()
    provider.handler(
        _event("Delete", "req-2", _spec(), PhysicalResourceId=failed["PhysicalResourceId"]), None
    )
    assert answers[-1]["Status"] == "SUCCESS" and _live(api) == []


def test_a_torn_reply_once_is_tried_again_and_finds_its_job(
    api: ApiClient, role: RoleApi, answers: list[dict[str, Any]]
) -> None:
    torn = [True]

    def once(
        method: str, path: str, body: Any, headers: Any, real: Callable[..., tuple[int, Any]]
    ) -> tuple[int, Any]:
        if torn.pop() if torn else False:
            return _torn(method, path, body, headers, real)
        return real(method, path, body, headers)

    role.faults.append(("PUT", "/v1/jobs/", None, once))
    provider.handler(_event("Create", "req-1", _spec()), None)
    assert answers[-1]["Status"] == "SUCCESS" and _live(api) == [answers[-1]["PhysicalResourceId"]]


def test_a_torn_reply_to_a_replacing_update_leaves_only_the_old_job(
    api: ApiClient, role: RoleApi, answers: list[dict[str, Any]]
) -> None:
    provider.handler(_event("Create", "req-1", _spec()), None)
    old_id = answers[-1]["PhysicalResourceId"]
    _another_deployment(role)
    role.faults.append(("PUT", "/v1/jobs/", OTHER_URL, _torn))
    move = _event(
        "Update",
        "req-2",
        _spec(),
        url=OTHER_URL,
        PhysicalResourceId=old_id,
        OldResourceProperties=_props(_spec()),
    )
    provider.handler(move, None)
    assert answers[-1]["Status"] == "FAILED" and answers[-1]["PhysicalResourceId"] == old_id
    assert "was deleted" in answers[-1]["Reason"] and _live(api) == [old_id]


# ------------------------------------------------------------ 6. the answer itself


def test_an_answer_whose_reply_was_lost_is_sent_again_not_the_request(
    api: ApiClient, role: RoleApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A raised handler() makes Lambda run the whole request again (a Create after its rollback's
    Delete would make the job again): the answer's PUT is repeated instead."""
    sent: list[dict[str, Any]] = []

    def urlopen(request: urllib.request.Request, timeout: float) -> _Answered:
        sent.append(json.loads(request.data))  # type: ignore[arg-type]
        if len(sent) == 1:
            raise TimeoutError("The read operation timed out")
        return _Answered()

    monkeypatch.setattr(provider.urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(provider, "SignedApi", role)
    monkeypatch.setattr(provider.time, "sleep", lambda _: None)
    provider.handler(_event("Create", "req-1", _spec()), None)  # does not raise
    assert len(sent) == 2 and sent[0] == sent[1] and sent[1]["Status"] == "SUCCESS"


# ------------------------------------------------------------ lower: properties


@pytest.mark.parametrize("prop", ["Enabeld", "enabled", "Disabled"])
def test_an_unknown_property_fails_naming_it(api: ApiClient, role: RoleApi, prop: str) -> None:
    with pytest.raises(provider.ProviderError, match=prop):
        provider.on_event(_event("Create", "req-1", _spec(), props={prop: "false"}), role)
    assert _live(api) == []


def test_an_unknown_property_the_old_properties_had_is_let_be(api: ApiClient, role: RoleApi) -> None:
    """Declared before unknown properties were refused: its update (and rollback) succeed."""
    job_id = provider.on_event(_event("Create", "req-1", _spec()), role)["PhysicalResourceId"]
    update = _event(
        "Update",
        "req-2",
        _spec(schedule="rate(1 hour)"),
        props={"Note": "x"},
        PhysicalResourceId=job_id,
        OldResourceProperties=_props(_spec(), Note="x"),
    )
    assert provider.on_event(update, role)["PhysicalResourceId"] == job_id


def test_an_unknown_calendar_property_fails_naming_it(role: RoleApi) -> None:
    event = _event("Create", "req-1", {"dates": ["2026-12-25"]}, props={"Nmae": "holidays"})
    event["ResourceType"] = provider.CALENDAR_RESOURCE_TYPE
    with pytest.raises(provider.ProviderError, match="Nmae"):
        provider.on_event(event, role)


@pytest.mark.parametrize("resource", [provider.RESOURCE_TYPE, provider.CALENDAR_RESOURCE_TYPE])
def test_cloudformations_own_service_timeout_is_a_property(
    api: ApiClient, role: RoleApi, resource: str
) -> None:
    """QA26: ServiceTimeout, which CloudFormation defines for every custom resource (and cfn-lint
    asks for), reaches the provider in ResourceProperties as ServiceToken does: it was refused as
    "not a property of this resource", failing the create."""
    spec = _spec() if resource == provider.RESOURCE_TYPE else {"dates": ["2026-12-25"]}
    event = _event("Create", "req-1", spec, props={"ServiceTimeout": "300"}) | {"ResourceType": resource}
    assert provider.on_event(event, role)["PhysicalResourceId"]
    path = "/v1/jobs" if resource == provider.RESOURCE_TYPE else "/v1/calendars"
    assert len(api.call("GET", path, user=ROLE).body["items"]) == 1


def test_state_in_a_spec_is_refused_naming_enabled(api: ApiClient, role: RoleApi) -> None:
    with pytest.raises(provider.ProviderError, match=r"state .*Enabled"):
        provider.on_event(_event("Create", "req-1", _spec(state="PAUSED"), props={"Enabled": "true"}), role)
    assert _live(api) == []


def test_state_an_old_spec_had_too_is_left_out_and_enabled_decides(api: ApiClient, role: RoleApi) -> None:
    job_id = provider.on_event(_event("Create", "req-1", _spec()), role)["PhysicalResourceId"]
    update = _event(
        "Update",
        "req-2",
        _spec(state="PAUSED", schedule="rate(1 hour)"),
        PhysicalResourceId=job_id,
        OldResourceProperties=_props(_spec(state="PAUSED")),
    )
    assert provider.on_event(update, role)["PhysicalResourceId"] == job_id
    [job] = api.call("GET", "/v1/jobs", user=ROLE).body["items"]
    assert job["state"] == "ENABLED" and job["schedule"] == "rate(1 hour)"


@pytest.mark.parametrize("field", sorted(OUTPUT_ONLY_FIELDS - {"state"}))  # state: the tests above
def test_an_output_only_field_in_a_spec_fails_naming_it_as_the_cdk_refuses_it(
    api: ApiClient, role: RoleApi, answers: list[dict[str, Any]], field: str
) -> None:
    # QA28: a raw template's Spec with "id" or "version" deployed, the field ignored without a word,
    # while the CDK's Job refuses it at synth
    provider.handler(_event("Create", "req-1", _spec(**{field: "x"})), None)
    assert answers[-1]["Status"] == "FAILED" and _live(api) == []
    assert (
        answers[-1]["Reason"]
        == f"ProviderError: Spec: {field}: output only (the API answers it, never takes it);"
        " leave it out"
    )
    # one an old Spec had too (declared before the refusal, or the rollback to it) is left out
    job_id = provider.on_event(_event("Create", "req-2", _spec()), role)["PhysicalResourceId"]
    old = _props(_spec(**{field: "x"}))
    update = _event(
        "Update", "req-3", _spec(**{field: "x"}, schedule="rate(1 hour)"), PhysicalResourceId=job_id
    )
    assert provider.on_event(update | {"OldResourceProperties": old}, role)["PhysicalResourceId"] == job_id
    assert api.call("GET", f"/v1/jobs/{job_id}", user=ROLE).body["schedule"] == "rate(1 hour)"
    assert provider.OUTPUT_ONLY == OUTPUT_ONLY_FIELDS  # the provider has no layer: its own list, the API's


def test_a_create_that_never_reached_the_api_names_no_job(
    role: RoleApi, answers: list[dict[str, Any]]
) -> None:
    """urllib's URLError: the request was not sent whole (no connection), so nothing was made."""

    def refused(*_: Any) -> tuple[int, Any]:
        raise urllib.error.URLError(TimeoutError("timed out"))

    role.faults.append(("PUT", "/v1/jobs/", None, refused))
    provider.handler(_event("Create", "req-1", _spec()), None)
    assert answers[-1]["Status"] == "FAILED" and answers[-1]["PhysicalResourceId"] == "failed-req-1"


def _simulated_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The provider's clock and sleeps on a simulated clock, ``[now]``, from 0."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(
        provider, "time", SimpleNamespace(monotonic=lambda: now[0], time=time.time, sleep=sleep)
    )
    monkeypatch.setattr(provider.Retrying.__init__, "__defaults__", (sleep, lambda: now[0]))
    monkeypatch.setattr(
        provider.on_event, "__kwdefaults__", {**provider.on_event.__kwdefaults__, "sleep": sleep}
    )
    return now


def test_a_slow_api_is_answered_before_the_functions_time_is_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """QA21's slow API on a simulated clock (a 120 s function): three PUTs with no answer, every
    other answer 19 s late. Each attempt is bounded by the time left (as SignedApi's urllib
    timeout is), so the answer goes out with ANSWER_MARGIN_S still left."""
    now = _simulated_clock(monkeypatch)
    answered: list[tuple[float, str, str]] = []
    monkeypatch.setattr(
        provider, "respond", lambda ev, status, outcome, reason="": answered.append((now[0], status, reason))
    )

    class SlowApi:
        puts = 0

        def __init__(self, url: str) -> None:
            self.limit = float(provider.HTTP_TIMEOUT_S)

        def bound(self, seconds: float) -> None:
            self.limit = seconds

        def request(self, method: str, path: str, body: Any = None, headers: Any = None) -> tuple[int, Any]:
            if method == "PUT":
                SlowApi.puts += 1
            if (method == "PUT" and SlowApi.puts <= 3) or self.limit < 19.0:
                now[0] += self.limit
                raise TimeoutError("timed out")
            now[0] += 19.0
            return 200, {"id": path.rsplit("/", 1)[-1]}

    monkeypatch.setattr(provider, "SignedApi", SlowApi)
    job_id = "cfn-" + "0" * 40
    update = _event(
        "Update",
        "r2",
        _spec(schedule="rate(10 minutes)"),
        PhysicalResourceId=job_id,
        OldResourceProperties=_props(_spec(schedule="rate(5 minutes)"), Enabled="false"),
    )
    provider.handler(update, SimpleNamespace(get_remaining_time_in_millis=lambda: 120_000))
    [(at, status, reason)] = answered
    assert at <= 120 - provider.ANSWER_MARGIN_S and status == "FAILED" and "timed out" in reason


def test_an_object_spec_refused_for_its_strings_says_why(
    api: ApiClient, role: RoleApi, answers: list[dict[str, Any]]
) -> None:
    """CloudFormation passes a Spec written as an object with its numbers as strings (QA21: the
    reason said only "Input should be a valid integer")."""
    event = _event("Create", "r1", _spec())
    event["ResourceProperties"]["Spec"] = _spec(retry={"max_attempts": "5"})  # YAML max_attempts: 5
    provider.handler(event, None)
    assert answers[-1]["Status"] == "FAILED" and "write Spec as JSON text" in answers[-1]["Reason"], answers
    assert _live(api) == []
    provider.handler(_event("Create", "r2", _spec(retry={"max_attempts": 5})), None)  # as JSON text
    assert answers[-1]["Status"] == "SUCCESS", answers[-1]


@pytest.mark.parametrize("service_timeout", ["60", 45])
def test_a_service_timeout_under_the_functions_time_bounds_every_request(
    monkeypatch: pytest.MonkeyPatch, service_timeout: Any
) -> None:
    """QA28: the provider worked to its function's time (120 s less the margin) whatever the
    resource's ServiceTimeout: with ServiceTimeout 60 and a slow API, CloudFormation failed the
    create at 60 s while the provider went on, and a job it made after that belonged to no stack
    (the rollback's Delete cannot name it), firing beside the one a retried deploy made."""
    now = _simulated_clock(monkeypatch)
    answered: list[tuple[float, str]] = []
    monkeypatch.setattr(
        provider, "respond", lambda ev, status, outcome, reason="": answered.append((now[0], status))
    )
    started: list[float] = []

    class SilentApi:
        def __init__(self, url: str) -> None:
            self.limit = float(provider.HTTP_TIMEOUT_S)

        def bound(self, seconds: float) -> None:
            self.limit = seconds

        def request(self, method: str, path: str, body: Any = None, headers: Any = None) -> tuple[int, Any]:
            started.append(now[0])
            now[0] += self.limit
            raise TimeoutError("timed out")

    monkeypatch.setattr(provider, "SignedApi", SilentApi)
    create = _event("Create", "r1", _spec(), props={"ServiceTimeout": service_timeout})
    provider.handler(create, SimpleNamespace(get_remaining_time_in_millis=lambda: 120_000))
    [(at, status)] = answered
    last = float(service_timeout) - provider.ANSWER_MARGIN_S
    assert status == "FAILED" and at <= last and started and all(t < last for t in started)


def test_a_short_service_timeout_leaves_the_api_half_of_it(
    api: ApiClient, role: RoleApi, answers: list[dict[str, Any]]
) -> None:
    """A ServiceTimeout shorter than twice the answer's margin keeps half of it for the answer, not
    the whole margin (which would leave the API no time at all, and fail every request)."""
    provider.handler(_event("Create", "req-1", _spec(), props={"ServiceTimeout": "20"}), None)
    assert answers[-1]["Status"] == "SUCCESS" and _live(api) == [answers[-1]["PhysicalResourceId"]]
