"""The provider of ``Custom::PunctualJob`` and ``Custom::PunctualCalendar``: CloudFormation's create,
update and delete of a declared job (or exclusion calendar), mapped onto Punctual's API and signed
(SigV4, ``execute-api``) as this function's role.

Tenancy
    The API's tenant is the caller's IAM identity: this function's role, of the stack that declares
    the jobs, never a name the template writes. Another stack's provider neither sees nor changes them.

Idempotency
    * Create puts the job at an id derived from the stack, the logical id and CloudFormation's
      request id, with ``If-None-Match: *``: a repeated delivery or a retry after a crash finds the
      job it made (412) and answers it; one request, one job.
    * Update replaces the job's spec in place (its history stays); a change of ``ApiUrl`` to another
      deployment is a replacement (a new physical id; CloudFormation then deletes the old job, or on
      a rollback the new one): :func:`lives_at` tells which (a move's rollback is in place).
    * Delete removes the job; one already gone (or a failed create's) is a success.

Enabled
    ``Enabled: false`` declares the job paused (created ``PAUSED``); an update that turns it false
    pauses before the new spec, true resumes after it, unchanged changes no state.

Only the standard library and botocore (which the Lambda runtime has): no layer, no packaging.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import re
import socket
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

logger = logging.getLogger()
logger.setLevel(logging.INFO)

RESOURCE_TYPE = "Custom::PunctualJob"
CALENDAR_RESOURCE_TYPE = "Custom::PunctualCalendar"
_OURS = re.compile(r"^cfn-[0-9a-f]{40}\Z")
_CALENDAR_NAME = re.compile(r"^(?!\.+\Z)[A-Za-z0-9_.-]{1,64}\Z")
_CALENDAR_ID = re.compile(r"^(?!\.+@)[A-Za-z0-9_.-]{1,64}@[0-9a-f]{12}\Z")
_REGION_IN_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?\Z")
HTTP_TIMEOUT_S = 20
MIN_ATTEMPT_S = 2.0  # no request (nor Secrets Manager call) is started with less time than this left
RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0)  # between attempts of one request, while time is left
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
ANSWER_MARGIN_S = 25.0  # kept for the answer to CloudFormation (RESPOND_ATTEMPTS PUTs) and the log
RESPOND_ATTEMPTS, RESPOND_TIMEOUT_S = 2, 10.0
MAX_RESPONSE_BYTES = 4096  # CloudFormation's limit on a custom resource's whole response body
# The answer of API Gateway (and so of a scheduler whose API was deleted) for an API id it does not
# have: a 403 without the "not authorized" text an IAM refusal carries.
_NO_SUCH_API = {"message": "Forbidden"}
# getaddrinfo's "no such host" answers (EAI_AGAIN, a DNS outage, is not one of them).
_NO_SUCH_HOST = frozenset(
    code for code in (getattr(socket, "EAI_NONAME", None), getattr(socket, "EAI_NODATA", None)) if code
)


class ProviderError(Exception):
    """A request the API refused: the reason CloudFormation shows.

    ``physical_id``: the job the answer names when it is not the request's own (a Create whose job
    exists: the rollback's Delete then deletes it).
    """

    def __init__(self, reason: str, physical_id: str | None = None) -> None:
        super().__init__(reason)
        self.physical_id = physical_id


class ApiUnreachableError(ProviderError):
    """No answer from the API in any attempt. ``gone``: every attempt found no such host or had its
    connection refused (the API, or its whole deployment, no longer exists). ``sent``: an attempt
    was sent whole and its answer is what was missing (timed out, torn): the API may have done it."""

    def __init__(self, reason: str, gone: bool, sent: bool = False) -> None:
        super().__init__(reason)
        self.gone, self.sent = gone, sent


class Api(Protocol):
    """One deployment's API as this provider calls it: status and JSON body of a request."""

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]: ...


class Retrying:
    """``api`` with each request tried again after no answer (a timeout, a refused or cut
    connection, a reply torn mid-body), a throttle (429) or a 5xx, waiting :data:`RETRY_DELAYS_S`
    in turn: the answer is the last attempt's; no answer at all raises
    :class:`ApiUnreachableError`.

    Every attempt, the first included, ends by ``deadline`` (``clock``'s time): none starts with
    less than :data:`MIN_ATTEMPT_S` left, and an ``api`` with a ``bound(seconds)`` method (the
    :class:`SignedApi`) is told the time the attempt may take (QA21: each request's first attempt
    took up to :data:`HTTP_TIMEOUT_S` however late it was, and the answer came after the function
    was killed)."""

    def __init__(
        self,
        api: Api,
        deadline: float,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.deadline, self.sleep, self.clock = api, deadline, sleep, clock

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        failures: list[Exception] = []  # the attempts that had no answer
        answer: tuple[int, Any] | None = None  # the last answer
        delays = iter(RETRY_DELAYS_S)
        while True:
            left = self.deadline - self.clock()
            if left < MIN_ATTEMPT_S:
                break
            bound = getattr(self.api, "bound", None)
            if callable(bound):
                bound(min(float(HTTP_TIMEOUT_S), left))
            try:
                answer = self.api.request(method, path, body, headers)
            except (OSError, http.client.HTTPException) as exc:  # a timeout, refused, torn: no answer
                failures.append(exc)
                logger.warning("%s %s: no answer (%r)", method, path, exc)
            else:
                if answer[0] not in RETRIED_STATUSES:
                    return answer
                logger.warning("%s %s: %s, tried again", method, path, answer[0])
            delay = next(delays, None)
            if delay is None or self.clock() + delay + MIN_ATTEMPT_S > self.deadline:
                break
            self.sleep(delay)
        if answer is not None:  # a throttle or a 5xx last (or before the last attempt's silence)
            return answer
        if not failures:
            raise ApiUnreachableError(f"{method} {path}: not sent, the function's time is up", gone=False)
        gone = all(_no_such_api(exc) for exc in failures)
        # urllib wraps in URLError what fails before the request is sent whole (connecting, sending)
        sent = any(not isinstance(exc, urllib.error.URLError) for exc in failures)
        raise ApiUnreachableError(
            f"{method} {path}: no answer from the job API in {len(failures)} attempts: {failures[-1]}"[:1000],
            gone,
            sent,
        )


def _no_such_api(exc: Exception) -> bool:
    """Whether ``exc`` says the API's host does not exist or refuses connections."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    no_host = isinstance(reason, socket.gaierror) and reason.errno in _NO_SUCH_HOST
    return no_host or isinstance(reason, ConnectionRefusedError)


def job_id_for(event: dict[str, Any]) -> str:
    """The id of the job a Create (or a replacing Update) makes: the same for every delivery of
    one CloudFormation request, another for every other request. Its last 8 hex digits name the
    API it is made at (:func:`api_tag`): where the resource's job lives is read from its id."""
    key = "|".join((event["StackId"], event["LogicalResourceId"], event["RequestId"]))
    api_url = event["ResourceProperties"].get("ApiUrl")
    return "cfn-" + hashlib.sha256(key.encode()).hexdigest()[:32] + api_tag(str(api_url or ""))


def _where(api_url: str) -> str:
    """An ``ApiUrl`` as one deployment: scheme and host in any case, no trailing slash."""
    parts = urlsplit(api_url.strip())
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"


def api_tag(api_url: str) -> str:
    """The 8 hex digits a job id made at ``api_url`` ends with."""
    return hashlib.sha256(_where(api_url).encode()).hexdigest()[:8]


def _problem(status: int, body: Any, doing: str) -> ProviderError:
    """The API's answer as one line: a problem's detail and each field it names, or the
    ``Message`` of the /schedules routes (and of API Gateway itself)."""
    detail = "(no body)" if body in (None, "") else str(body)
    if isinstance(body, dict):
        fields = [
            f"{e.get('field')}: {e.get('message')}" for e in body.get("errors") or [] if isinstance(e, dict)
        ]
        said = body.get("detail") or body.get("title") or body.get("Message") or body.get("message")
        detail = "; ".join([str(said or json.dumps(body)[:500]), *fields])
    return ProviderError(f"{doing}: the job API answered {status}: {detail}"[:1000])


def signs_webhooks(spec: dict[str, Any]) -> bool:
    """Whether the job has a signing secret: an http target (or one with a url and no type, the
    API's default), its own or an alert rule's (as the API decides it)."""

    def is_http(target: Any) -> bool:
        return isinstance(target, dict) and (
            target.get("type") == "http" or ("type" not in target and "url" in target)
        )

    alerts = spec.get("alerts") or []
    return is_http(spec.get("target")) or any(
        isinstance(a, dict) and is_http(a.get("target")) for a in alerts
    )


def _outputs(api: Api, job_id: str, reply: Any = None) -> dict[str, Any]:
    """The attributes ``Fn::GetAtt`` reads: ``JobId`` and ``Arn`` (the job's schedule ARN: the one
    the API's reply names for a job that is an EventBridge schedule, else read from /schedules)."""
    named = reply.get("scheduler") if isinstance(reply, dict) else None
    if isinstance(named, dict) and named.get("arn"):
        arn = named["arn"]
    else:
        status, body = api.request("GET", f"/schedules/{quote(job_id, safe='')}")
        if status != 200:
            raise _problem(status, body, f"reading job {job_id}'s schedule ARN")
        arn = body["Arn"]
    return {"PhysicalResourceId": job_id, "Data": {"JobId": job_id, "Arn": arn}}


class Secrets(Protocol):
    """Where a webhook job's signing secret is kept (Secrets Manager)."""

    def put(self, secret_arn: str, value: str) -> None: ...


class SecretsManager:
    """Secrets Manager, as this function's role (``secretsmanager:PutSecretValue`` on the job's
    secret only). One attempt, its connect and read timeouts within the time left before
    ``deadline`` (``time.monotonic``): botocore's defaults (60 s each, retried) outlasted the
    function (QA21), and CloudFormation got no answer."""

    def __init__(self, deadline: float | None = None) -> None:
        self.deadline = deadline if deadline is not None else time.monotonic() + 60

    def put(self, secret_arn: str, value: str) -> None:
        import botocore.session
        from botocore.config import Config

        left = self.deadline - time.monotonic()
        if left < MIN_ATTEMPT_S:
            raise ProviderError("not stored: the function's time is up")
        each = min(float(HTTP_TIMEOUT_S), left / 2)  # connecting, then reading the answer
        config = Config(connect_timeout=each, read_timeout=each, retries={"total_max_attempts": 1})
        region = f"{secret_arn}:::".split(":")[3] or os.environ.get("AWS_REGION", "us-east-1")  # ARN or name
        session = botocore.session.get_session()
        client = session.create_client("secretsmanager", region_name=region, config=config)
        client.put_secret_value(SecretId=secret_arn, SecretString=value)


def _keep_secret(api: Api, secrets: Secrets, job_id: str, secret_arn: str, secret: Any) -> None:
    """Store the job's signing secret at ``secret_arn``: ``secret`` as the create's reply showed it,
    else a new one (rotate-secret: the previous keeps signing until the next rotation)."""
    if not isinstance(secret, str) or not secret:
        status, body = api.request("POST", f"/v1/jobs/{job_id}/rotate-secret")
        if status != 200 or not isinstance(body, dict) or not body.get("signing_secret"):
            raise _problem(status, body, f"making job {job_id}'s signing secret")
        secret = body["signing_secret"]
    try:
        secrets.put(secret_arn, secret)
    except Exception as exc:
        raise ProviderError(f"storing job {job_id}'s signing secret in {secret_arn}: {exc}"[:1000]) from None


def _create(
    api: Api, secrets: Secrets, job_id: str, props: dict[str, Any], spec: dict[str, Any], replacing: bool
) -> dict[str, Any]:
    """Create the job at ``job_id`` and answer its outputs. A failure once the job exists leaves
    none behind: a job this request made is deleted before the failure is answered, and a Create's
    failure names the job (its rollback's Delete deletes it whatever happened here)."""
    created = spec if enabled(props) else {**spec, "state": "PAUSED"}
    try:
        status, body = api.request("PUT", f"/v1/jobs/{job_id}", created, {"If-None-Match": "*"})
    except ApiUnreachableError as exc:
        if not exc.sent:  # never reached the API: nothing was made
            raise
        # sent, but its answer timed out or was cut mid-body: the job may exist
        if replacing:  # the old job stays the resource's: the new one is not left behind it
            raise ProviderError(f"{exc}; {_undo(api, job_id)}") from exc
        raise ProviderError(
            f"{exc}; job {job_id} may have been made: the rollback deletes it", job_id
        ) from exc
    if status not in (201, 412):  # 412: this request made it already (a repeated delivery)
        raise _problem(status, body, "creating the job")
    try:
        secret_arn = props.get("SigningSecretArn") if signs_webhooks(spec) else None
        if secret_arn:
            secret = body.get("signing_secret") if status == 201 and isinstance(body, dict) else None
            _keep_secret(api, secrets, job_id, secret_arn, secret)
        return _outputs(api, job_id, body if status == 201 else None)
    except Exception as exc:
        reason = str(exc)
        if status == 201:  # made by this very request: not left live behind a failure
            reason += "; " + _undo(api, job_id)
        elif replacing:
            reason += f"; job {job_id} (made by an earlier delivery of this request) may be left: delete it"
        raise ProviderError(reason, None if replacing else job_id) from exc


def _undo(api: Api, job_id: str) -> str:
    """Delete the job this request made; what became of it, for the reason."""
    try:
        status, body = api.request("DELETE", f"/v1/jobs/{job_id}")
    except ProviderError as exc:
        return f"job {job_id} could not be deleted ({exc}): delete it"
    if status in (204, 404):
        return f"job {job_id} was deleted"
    return f"job {job_id} could not be deleted ({_problem(status, body, 'deleting it')}): delete it"


def _delete_at(api: Api, path: str, physical: str, what: str) -> dict[str, Any]:
    """Delete what ``path`` names; one already gone, or whose scheduler is gone, is deleted."""
    done: dict[str, Any] = {"PhysicalResourceId": physical, "Data": {}}
    gone = f"{what} is taken as deleted with its scheduler, whose API "
    try:
        status, body = api.request("DELETE", path)
    except ApiUnreachableError as exc:
        if not exc.gone:
            raise
        return {**done, "Reason": gone + f"does not exist or refuses connections ({exc})"}
    if status == 403 and body == _NO_SUCH_API:
        return {**done, "Reason": gone + "API Gateway does not know (403 Forbidden, no IAM refusal)"}
    if status not in (204, 404):  # a calendar's 409: jobs still exclude it (the reason names them)
        raise _problem(status, body, f"deleting {what}")
    return done


JOB_PROPERTIES = ("ServiceToken", "ServiceTimeout", "ApiUrl", "Enabled", "SigningSecretArn", "Spec")
CALENDAR_PROPERTIES = ("ServiceToken", "ServiceTimeout", "ApiUrl", "Name", "Spec")
OUTPUT_ONLY = frozenset({"created_at", "id", "next_fire_at", "paused_at", "signing_secret", "skipped_slots"})
OUTPUT_ONLY |= {"state", "state_reason", "updated_at", "version"}  # = the API's OUTPUT_ONLY_FIELDS (tested)


def _known_properties(props: dict[str, Any], known: tuple[str, ...], event: dict[str, Any]) -> None:
    """Refuse a property the resource type does not have (QA21: a misspelt ``Enabled`` was
    ignored, and a job declared paused fired), as CloudFormation refuses one of its own types;
    one the old properties had too is let be (declared before the refusal: the update, and the
    rollback to them, must not fail on it)."""
    had = event.get("OldResourceProperties") if event.get("RequestType") == "Update" else None
    kept = set(had) if isinstance(had, dict) else set()
    unknown = sorted(str(key) for key in props if key not in known and key not in kept)
    if unknown:
        names = ", ".join(fit(repr(key), 80) for key in unknown[:5])
        raise ProviderError(f"{names}: not a property of this resource (its properties: {', '.join(known)})")


def _declared_spec(props: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """The ``Spec`` property; an output-only field is refused, as the CDK refuses it: ``state`` (QA21:
    it overrode ``Enabled``) or another (QA28: ``id``, ``version`` were ignored without a word). One
    the old properties' Spec had too (declared before the refusal, or its rollback) is left out."""
    spec = _spec(props)
    new = sorted(OUTPUT_ONLY.intersection(spec) - set(_old_spec(old) or ()))
    if "state" in new:
        raise ProviderError("Spec: state is not declared there: Enabled (true or false) declares it")
    if new:
        raise ProviderError(f"Spec: {new[0]}: output only (the API answers it, never takes it); leave it out")
    return {key: value for key, value in spec.items() if key not in OUTPUT_ONLY}


def same_api(one: str, other: str) -> bool:
    """Whether two ``ApiUrl`` values are one deployment (a trailing slash, or the case of the
    scheme and host, does not count)."""
    return _where(one) == _where(other)


def lives_at(api: Api, physical: str, api_url: str, old_url: str) -> bool:
    """Whether the resource's job (``physical``) lives at ``api_url``: an Update there is in
    place, else a replacement. Decided from the job's id, which names the API it was made at, not
    from ``OldResourceProperties``: in the rollback of a failed move those name the API the job
    never reached (QA21: the rollback made a second copy of the job). A move, or an id made before
    ids named their API: in place when the job is found at ``api_url``, which is then the same
    deployment (another Region's API of a multi-Region one, over the one table: QA30, a replacement
    made a second job beside it, and the old one's delete went to the Region that may be lost)."""
    if not _OURS.match(physical):
        return False
    if physical[-8:] == api_tag(api_url) or same_api(old_url, api_url):
        return True
    status, _ = api.request("GET", f"/v1/jobs/{physical}")
    return status == 200


def on_event(
    event: dict[str, Any],
    api_for: Callable[[str], Api],
    *,
    secrets: Secrets | None = None,
    deadline: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """What CloudFormation is told for ``event``: ``PhysicalResourceId``, ``Data`` and, for a
    success that needs one, ``Reason``. Each API request is tried again (:class:`Retrying`) until
    ``deadline`` (``time.monotonic``; default: a minute from now).

    Raises
    ------
    ProviderError
        The API refused the job (the reason names what it refused).
    """
    kind = event["RequestType"]
    props = event["ResourceProperties"]
    physical = str(event.get("PhysicalResourceId") or "")
    calendar = event.get("ResourceType") == CALENDAR_RESOURCE_TYPE
    ours = _CALENDAR_ID if calendar else _OURS
    if kind == "Delete" and not ours.match(physical):  # a create that failed before it made anything
        return {"PhysicalResourceId": physical, "Data": {}}
    if kind != "Delete":  # a Delete never fails on its properties (they were taken before)
        _known_properties(props, CALENDAR_PROPERTIES if calendar else JOB_PROPERTIES, event)
    given = props.get("ApiUrl")
    if not isinstance(given, str) or not given:
        raise ProviderError("ApiUrl: the property is required (the Punctual stack's ApiUrl output)")
    # QA26: a space or newline around it (a parameter's, a !Sub block's) was sent as it is, and
    # every request (the rollback's Delete too) failed "no answer": the stack stuck in
    # DELETE_FAILED. Around it, it is left out; inside it, refused before anything is sent.
    api_url = given.strip()
    parts = urlsplit(api_url)
    callable_url = api_url.isascii() and api_url.isprintable() and " " not in api_url
    if parts.scheme.lower() not in ("https", "http") or not parts.hostname or not callable_url:
        raise ProviderError(
            "ApiUrl: the Punctual stack's ApiUrl output (https://<api id>.execute-api.<region>"
            f".amazonaws.com/<stage>), not {fit(repr(given), 200)}"
        )
    until = deadline if deadline is not None else time.monotonic() + 60
    api = Retrying(api_for(api_url), until, sleep)
    if calendar:
        return on_calendar_event(event, api, api_url)
    store = secrets or SecretsManager(until)
    if kind == "Delete":
        return _delete_at(api, f"/v1/jobs/{physical}", physical, f"job {physical}")
    old = event.get("OldResourceProperties") or {}
    spec = _declared_spec(props, old if kind == "Update" else {})
    if kind == "Create":
        return _create(api, store, job_id_for(event), props, spec, replacing=False)
    if kind != "Update":
        raise ProviderError(f"unknown RequestType {kind!r}")
    if not lives_at(api, physical, api_url, str(old.get("ApiUrl") or "")):
        # a replacement: the old one is deleted later
        return _create(api, store, job_id_for(event), props, spec, replacing=True)
    now = enabled(props)
    was = _old_enabled(old, now)
    if was and not now and not _set_state(api, physical, "pause"):
        return _create(api, store, job_id_for(event), props, spec, replacing=True)
    same = _same_spec(old, spec)
    rearmed = not now and not same and (was or _completed(api, physical))  # COMPLETED: no pause (409)
    if same:  # nothing to put (review: a one-time job that ran refuses its own spec)
        status, body = api.request("GET", f"/v1/jobs/{physical}")
    else:
        status, body = api.request("PUT", f"/v1/jobs/{physical}", spec)
    if status == 404:  # deleted outside CloudFormation: declared again, as a replacement
        return _declared_again(api, store, event, spec, physical)
    if status != 200:
        raise _problem(status, body, f"updating job {physical}")
    if now and not was:
        _set_state(api, physical, "resume")
    elif rearmed and isinstance(body, dict) and body.get("state") == "ENABLED":  # the spec re-enabled it
        _set_state(api, physical, "pause")  # after it (QA26: a COMPLETED job declared disabled fired)
    secret_arn = props.get("SigningSecretArn") if signs_webhooks(spec) else None
    if secret_arn and not _kept(old, secret_arn):
        _keep_secret(api, store, physical, secret_arn, None)
    return _outputs(api, physical, body)


# What the API answers for a job none of whose slots is still to come (punctual.timing.slots.no_slot_reason)
_NO_SLOT_LEFT = ("no future slot", "has no slot")


def _declared_again(
    api: Api, store: Secrets, event: dict[str, Any], spec: dict[str, Any], physical: str
) -> dict[str, Any]:
    """An Update of a job that is gone: made again as a replacement, unless its spec has no slot
    left to run. Then it ran its course and went (a one-time job with ``delete_after_completion``,
    its instant passed): there is nothing to make again, and the update, or its rollback, succeeds
    on the resource as it is (QA23: both were refused "no future slot", the stack left in
    UPDATE_ROLLBACK_FAILED). Only ``JobId`` is answered: the job has no schedule ARN any more."""
    try:
        return _create(api, store, job_id_for(event), event["ResourceProperties"], spec, replacing=True)
    except ProviderError as exc:
        if isinstance(exc, ApiUnreachableError) or not any(said in str(exc) for said in _NO_SLOT_LEFT):
            raise
    return {
        "PhysicalResourceId": physical,
        "Data": {"JobId": physical},
        "Reason": f"job {physical} ran its course and is gone (no slot left): nothing to update",
    }


# ---------------------------------------------------------------- Custom::PunctualCalendar
#
# A calendar is named (``Name``, or one derived from the stack and logical id) and put whole: PUT
# creates or replaces it, so a repeated delivery, a retry and a rollback all land on the declared
# days. Its physical id is the name and the API's digest: an update that moves it to another name
# or deployment answers a new one, and CloudFormation deletes the old calendar once its jobs moved.


def calendar_name_for(event: dict[str, Any]) -> str:
    """The calendar's ``Name`` property, else one derived from the stack and the logical id."""
    props = event["ResourceProperties"]
    name = props.get("Name")
    if name is None or name == "":
        return _made_calendar_name(event)
    if not isinstance(name, str) or not _CALENDAR_NAME.match(name):
        rule = "1-64 characters of letters, digits, '-', '_' and '.', not dots alone"
        raise ProviderError(f"Name: {rule}: {fit(repr(name), 80)}")
    return name


MAX_DESCRIPTION = 1024  # the API's


def _marked(spec: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
    """The declared calendar with this resource's mark (of its stack and logical id) ending its
    description: a calendar of the name found with it is this resource's (a repeated delivery, or a
    move to another Region's API over the one table), never one with the same days (QA30 review)."""
    text, mark = spec.get("description") or "", _mark(event)
    if not isinstance(text, str):
        return spec  # the API refuses it, naming the field
    if len(text) + len(mark) + 1 > MAX_DESCRIPTION:
        raise ProviderError(f"Spec: description: at most {MAX_DESCRIPTION - len(mark) - 1} characters here")
    return {**spec, "description": f"{text}\n{mark}" if text else mark}


def _ours(api: Api, path: str, event: dict[str, Any]) -> bool:
    """Whether the calendar at ``path`` carries this resource's mark (it made it)."""
    status, body = api.request("GET", path)
    return status == 200 and isinstance(body, dict) and str(body.get("description")).endswith(_mark(event))


def _made_calendar_name(event: dict[str, Any]) -> str:
    """The name a calendar with no ``Name`` gets: from the stack and the logical id."""
    seed = f"{event['StackId']}/{event['LogicalResourceId']}"
    return "cfn-" + hashlib.sha1(seed.encode(), usedforsecurity=False).hexdigest()


def _mark(event: dict[str, Any]) -> str:
    return f"[made by CloudFormation resource {_made_calendar_name(event)[4:28]}]"


def _calendar_id(name: str, api_url: str) -> str:
    """The name and its deployment (the URL's scheme and host in any case: review)."""
    return f"{name}@{hashlib.sha1(_where(api_url).encode(), usedforsecurity=False).hexdigest()[:12]}"


def on_calendar_event(event: dict[str, Any], api: Api, api_url: str) -> dict[str, Any]:
    """What CloudFormation is told for a ``Custom::PunctualCalendar`` request. A calendar this
    resource did not make is never taken over: a Create (or an Update to another name or deployment)
    puts it with ``If-None-Match: *``, and a name that exists is refused, as CloudFormation refuses a
    named resource that exists, unless it is the one made from this stack and logical id (a repeated
    delivery); else CloudFormation's cleanup, or a rollback, would delete a calendar another resource
    (or the API) made and still uses (review). An Update to another API that has it and it
    carries this resource's mark is in place (another Region's API of a multi-Region deployment,
    the one table: QA30; not a calendar of the name with the old days, another's: review)."""
    kind = event["RequestType"]
    physical = str(event.get("PhysicalResourceId") or "")
    if kind == "Delete":
        name = physical.rsplit("@", 1)[0]
        return _delete_at(api, f"/v1/calendars/{quote(name, safe='')}", physical, f"calendar {name}")
    if kind not in ("Create", "Update"):
        raise ProviderError(f"unknown RequestType {kind!r}")
    name = calendar_name_for(event)
    spec = _marked(_spec(event["ResourceProperties"]), event)
    made = _calendar_id(name, api_url)
    path = f"/v1/calendars/{quote(name, safe='')}"
    if kind == "Update" and made != physical and physical.rsplit("@", 1)[0] == name:  # moved (QA30):
        made = physical if _ours(api, path, event) else made  # found there, its own: the one table
    if kind == "Update" and made == physical:  # in place: the days put over its own
        status, body = api.request("PUT", path, spec)
    else:
        status, body = api.request("PUT", path, spec, {"If-None-Match": "*"})
        if status == 412 and (name == _made_calendar_name(event) or _ours(api, path, event)):
            status, body = api.request("PUT", path, spec)  # this very request made it before
        elif status == 412:
            raise ProviderError(
                f"calendar {name!r} exists and this resource did not make it (another resource, an"
                " earlier stack or the API did): give this one another Name, or delete that one"
            )
    if status not in (200, 201):
        raise _problem(status, body, f"putting calendar {name}")
    return {"PhysicalResourceId": made, "Data": {"Name": name}}


def enabled(props: dict[str, Any]) -> bool:
    """The ``Enabled`` property (default true): CloudFormation passes a boolean as text."""
    value = props.get("Enabled", True)
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ProviderError(f"Enabled: true or false, not {fit(repr(value), 60)}")
    return text == "true"


def _old_enabled(old: dict[str, Any], now: bool) -> bool:
    """The old properties' ``Enabled``; one that cannot be read is taken as ``now`` (no change of
    state). Only a rollback sends one: the failed update refused it before it changed anything,
    and the rollback must not fail on it too (QA21: UPDATE_ROLLBACK_FAILED)."""
    try:
        return enabled(old)
    except ProviderError:
        return now


def _set_state(api: Api, job_id: str, action: str) -> bool:
    """Pause or resume the job; False when it is gone (404). A COMPLETED job (its last slot run)
    fires nothing either way: its pause or resume is done (review: its 409 failed the update, and
    the rollback after it)."""
    status, body = api.request("POST", f"/v1/jobs/{job_id}/{action}")
    if status == 404:
        return False
    if status != 200 and not (status == 409 and _completed(api, job_id)):
        raise _problem(status, body, f"{'pausing' if action == 'pause' else 'resuming'} job {job_id}")
    return True


def _completed(api: Api, job_id: str) -> bool:
    found, job = api.request("GET", f"/v1/jobs/{job_id}")
    return found == 200 and isinstance(job, dict) and job.get("state") == "COMPLETED"


def _old_spec(old: dict[str, Any]) -> dict[str, Any] | None:
    """The old properties' Spec; None when it cannot be read (a rollback must not fail on it)."""
    try:
        return _spec(old)
    except (ProviderError, RecursionError):
        return None


def _same_spec(old: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether the old properties declared this very spec (output-only fields aside)."""
    had = _old_spec(old)
    return had is not None and {key: value for key, value in had.items() if key not in OUTPUT_ONLY} == spec


def _kept(old: dict[str, Any], secret_arn: str) -> bool:
    """Whether the old properties had the job's signing secret stored at ``secret_arn`` already."""
    had = _old_spec(old)
    return had is not None and old.get("SigningSecretArn") == secret_arn and signs_webhooks(had)


def _spec(props: dict[str, Any]) -> dict[str, Any]:
    """The ``Spec`` property: the job as JSON text (an object, as YAML writes one, is taken too)."""
    raw = props.get("Spec")
    if isinstance(raw, dict):
        return raw
    try:
        spec = json.loads(raw, object_pairs_hook=_once) if isinstance(raw, str) else None
    except ValueError as exc:
        raise ProviderError(f"Spec: not JSON text ({exc})") from None
    except RecursionError:
        raise ProviderError("Spec: nested too deeply") from None
    if not isinstance(spec, dict):
        raise ProviderError("Spec: the job (or calendar) as a JSON object (text) is required")
    return spec


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s object_pairs_hook: a key given twice is refused (QA30: the last was taken)."""
    if len(found := dict(pairs)) < len(pairs):
        twice = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise ProviderError(f"Spec: the key {twice[:80]!r} is given twice")
    return found


class SignedApi:
    """The API at ``base_url``, every request signed with this function's credentials."""

    def __init__(self, base_url: str) -> None:
        import botocore.session

        self.base_url = base_url.rstrip("/")
        host = urlsplit(self.base_url).hostname or ""
        found = _REGION_IN_HOST.search(host)
        self.region = found.group(1) if found else os.environ.get("AWS_REGION", "us-east-1")
        self.credentials = botocore.session.get_session().get_credentials()
        self.timeout = float(HTTP_TIMEOUT_S)

    def bound(self, seconds: float) -> None:
        """The time the next request may take (:class:`Retrying` gives what is left)."""
        self.timeout = max(seconds, 0.1)

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        data = None if body is None else json.dumps(body).encode()
        all_headers = {**(headers or {}), **({"Content-Type": "application/json"} if data else {})}
        signed = AWSRequest(method=method, url=self.base_url + path, data=data, headers=all_headers)
        SigV4Auth(self.credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(signed)
        request = urllib.request.Request(
            signed.url, data=data, headers=dict(signed.headers.items()), method=method
        )
        ends = time.monotonic() + self.timeout  # the timeout bounds each socket operation: and the body
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                chunks = []
                while chunk := reply.read(65536):
                    chunks.append(chunk)
                    if time.monotonic() > ends:
                        raise TimeoutError(f"the reply took over {self.timeout:.0f} s")
                return reply.status, _json(b"".join(chunks))
        except urllib.error.HTTPError as error:
            return error.code, _json(error.read())


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")[:500]


def respond(event: dict[str, Any], status: str, outcome: dict[str, Any], reason: str = "") -> None:
    """Tell CloudFormation (PUT to the pre-signed ``ResponseURL``): the whole body within
    :data:`MAX_RESPONSE_BYTES`, the reason cut to fit."""
    answer = {
        "Status": status,
        "Reason": "",
        "PhysicalResourceId": outcome.get("PhysicalResourceId")
        or event.get("PhysicalResourceId")
        or f"failed-{event['RequestId']}",
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "Data": outcome.get("Data") or {},
    }
    room = MAX_RESPONSE_BYTES - len(json.dumps(answer).encode())
    answer["Reason"] = fit(reason or "See the provider function's log", room)
    body = json.dumps(answer).encode()
    request = urllib.request.Request(
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": ""}
    )
    for attempt in range(RESPOND_ATTEMPTS):  # a PUT of the same object: repeating it is safe
        try:
            with urllib.request.urlopen(request, timeout=RESPOND_TIMEOUT_S):
                return
        except (OSError, http.client.HTTPException) as exc:
            # Raised after the last attempt: Lambda then runs the whole request again, which a
            # request CloudFormation had answered and then deleted would make again (QA21)
            if attempt == RESPOND_ATTEMPTS - 1:
                raise
            logger.warning("the answer to CloudFormation: %r, tried again", exc)
            time.sleep(1.0)


def fit(text: str, room: int) -> str:
    """``text`` cut so that it takes at most ``room`` bytes inside a JSON string (as ``json.dumps``
    writes it: non-ASCII escaped to ``\\uXXXX``), marked ``...`` when cut."""
    if len(json.dumps(text)) - 2 <= room:
        return text
    kept, used, limit = [], 0, max(room - 3, 0)
    for char in text:
        size = len(json.dumps(char)) - 2
        if used + size > limit:
            break
        kept.append(char)
        used += size
    return "".join(kept) + "..." if room >= 3 else ""


# Why an API refusal of a Spec written as an object may not be the template's fault as written
OBJECT_SPEC_HINT = (
    " (Spec was given as an object: CloudFormation passes its numbers and booleans as strings;"
    " write Spec as JSON text, e.g. with Fn::ToJsonString or !Sub)"
)


def _service_time(event: dict[str, Any]) -> float:
    """What ``ServiceTimeout`` (3600 when not a number) leaves for the API, less the answer's margin
    (half of it when shorter): CloudFormation fails the request then; a later job is no stack's (QA28)."""
    given = str((event.get("ResourceProperties") or {}).get("ServiceTimeout", "")).strip()
    timeout = float(given) if given.replace(".", "", 1).isdigit() else 3600.0
    return timeout - min(ANSWER_MARGIN_S, timeout / 2)


def handler(event: dict[str, Any], context: Any) -> None:
    """Lambda entry point: do the request, then answer CloudFormation whatever happened."""
    logger.info(
        "%s %s %s", event.get("RequestType"), event.get("LogicalResourceId"), event.get("PhysicalResourceId")
    )
    left_s = context.get_remaining_time_in_millis() / 1000 if context is not None else 60.0
    deadline = time.monotonic() + min(left_s - ANSWER_MARGIN_S, _service_time(event))
    try:
        outcome = on_event(event, SignedApi, deadline=deadline)
    except ProviderError as exc:
        logger.exception("request failed")
        reason = f"{type(exc).__name__}: {exc}"
        if isinstance((event.get("ResourceProperties") or {}).get("Spec"), dict) and "answered 4" in str(exc):
            # (QA21: "Input should be a valid integer", with nothing to say why)
            reason += OBJECT_SPEC_HINT
        respond(event, "FAILED", {"PhysicalResourceId": exc.physical_id}, reason)
        return
    except Exception as exc:  # every failure is an answer: CloudFormation never waits an hour
        logger.exception("request failed")
        respond(event, "FAILED", {}, f"{type(exc).__name__}: {exc}")
        return
    respond(event, "SUCCESS", outcome, outcome.get("Reason", ""))
