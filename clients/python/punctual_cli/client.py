"""An HTTP client for the Punctual API (standard library only; botocore to sign).

Requests to an API Gateway endpoint (``https://<id>.execute-api.<region>.amazonaws.com/<stage>``)
are signed with SigV4 (service ``execute-api``) from the standard AWS credential chain;
``sign=True`` forces signing for a custom domain. Local mode needs no signature: its
tenant comes from ``X-Punctual-Tenant``. Errors are :class:`ApiError` carrying the
problem details the API answered. A 429 or 503 (nothing was done), and no answer at all to a
request that can be repeated, are tried again as :class:`~punctual_cli.retries.RetryPolicy`
says (``retry=RetryPolicy(max_attempts=1)``: never).
"""

from __future__ import annotations

import html
import http.client
import itertools
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from punctual_cli.retries import (
    LOST_ANSWER_STATUSES,
    RETRIED_STATUSES,
    RetryPolicy,
    gateway_500,
    in_progress,
    once_key,
    repeatable,
    retry_after,
)

DEFAULT_ENDPOINT = "http://127.0.0.1:8080"
_REGION = re.compile(r"[A-Za-z0-9-]{1,64}")
_EXECUTE_API = re.compile(r"^[a-z0-9]+\.execute-api\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?\Z")


class ClientInputError(ValueError):
    """A request the client cannot make from its arguments (an empty id): the caller's input."""


# The fields of an error the API answers (RFC 9457: title, detail) or API Gateway does (message).
PROBLEM_FIELDS = frozenset({"title", "detail", "message"})

# What an answer of the API holds (``request``'s ``answers``): its first field, then the fields of
# the object it is (a job, a run, a calendar), or of each of a listing's ``items``: what the
# command's rows and details are made of. An answer without them is another service's (QA30:
# {"items": [{"id": ...}]} of another job service, printed with -o json as the tenant's jobs, the
# table an internal error, KeyError 'state').
JOB = ("id", "state", "version")
RUN = ("slot", "status", "attempt")
CALENDAR = ("name", "version")
JOB_PAGE, RUN_PAGE, CALENDAR_PAGE = ("items", *JOB), ("items", *RUN), ("items", *CALENDAR)
ALERT_PAGE = ("items", "slot", "condition", "status")


class ApiError(Exception):
    """The API answered an error, or could not be reached (``status`` 0).

    Attributes
    ----------
    status : int
        The HTTP status (0: no answer).
    problem : dict
        The RFC 9457 problem details (``title``, ``detail``, ``errors`` ...), as far as given.
    headers : dict
        The answer's headers (none when there was no answer).
    """

    def __init__(
        self, status: int, problem: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        self.status = status
        self.problem = dict(problem)
        self.headers = dict(headers or {})
        super().__init__(self.summary())

    @property
    def retry_after_s(self) -> float | None:
        """The seconds the answer's ``Retry-After`` asks to wait (None: it gave none)."""
        return retry_after(self.headers)

    @property
    def errors(self) -> list[dict[str, str]]:
        found = self.problem.get("errors") or []
        return [e for e in found if isinstance(e, dict)]

    def summary(self) -> str:
        """One line: ``404 Not found: job 'x' not found``."""
        title = self.problem.get("title") or self.problem.get("message") or "error"
        detail = self.problem.get("detail")
        head = f"{self.status} {title}" if self.status else str(title)
        return f"{head}: {detail}" if detail and detail != title else head


class UnansweredError(ApiError):
    """The request got no answer: the connection failed (``sent`` False), or the request was sent
    and no answer came in time or the connection dropped (``sent`` True: it may have been done)."""

    def __init__(self, problem: Mapping[str, Any], sent: bool) -> None:
        super().__init__(0, problem)
        self.sent = sent


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any


@dataclass
class PunctualClient:
    """Calls the API at ``endpoint``.

    Parameters
    ----------
    endpoint
        Base URL, with the stage for API Gateway (``https://abc.execute-api.eu-west-1.amazonaws.com/prod``).
    sign
        Sign with SigV4: None (default) signs exactly when the host is an execute-api host.
    region
        Signing region (default: from the host, else the credential chain's region).
    tenant
        Local mode only: sent as ``X-Punctual-Tenant``.
    timeout_s
        Socket timeout per request.
    retry
        When a request is sent again (429, 503; no answer to one that can be repeated): see
        :mod:`punctual_cli.retries`. ``RetryPolicy(max_attempts=1)`` never retries.
    """

    endpoint: str = DEFAULT_ENDPOINT
    sign: bool | None = None
    region: str | None = None
    tenant: str | None = None
    timeout_s: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    _credentials: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.endpoint = self.endpoint.rstrip("/")
        odd = next((char for char in self.endpoint if not "!" <= char <= "~"), None)
        if odd is not None:  # (QA21: an internal error, or "cannot reach", exit 1, for a typo)
            raise ValueError(
                f"endpoint {_shown(self.endpoint)[:80]!r} has {odd!r}: a URL is printable ASCII"
                " without spaces"
                " (percent-encode a path, write a host name in punycode)"
            )
        try:  # (QA24: "Invalid IPv6 URL", naming nothing, for an unclosed '[')
            parts = urlsplit(self.endpoint)
            parts.hostname, parts.port  # noqa: B018  (read to check them: a bad one is a ValueError)
        except ValueError as exc:
            raise ValueError(f"endpoint {_shown(self.endpoint)[:80]!r}: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint must be an http(s) URL, got {_shown(self.endpoint)[:80]!r}")
        if parts.query or parts.fragment or self.endpoint.endswith(("?", "#")):
            # (QA24: the paths went after it, into the query: every request asked for "/", a 404)
            raise ValueError(
                f"endpoint {_shown(self.endpoint)[:80]!r} has a query or fragment: give the API's base URL"
                " (scheme, host, port and stage path)"
            )
        if self.tenant is not None and not self.tenant.isprintable():
            raise ClientInputError("the tenant (--tenant, PUNCTUAL_TENANT) has a control character")
        if self.tenant is not None:  # (QA21: outside Latin-1, an internal error as it was sent)
            check_header_value("X-Punctual-Tenant", self.tenant)
        if self.tenant is not None and self.tenant and not self.tenant.strip():
            # (QA: a blank one acted as the default tenant: a job created so landed there)
            raise ClientInputError("the tenant (--tenant, PUNCTUAL_TENANT) is blank")
        match = _EXECUTE_API.match(parts.hostname)
        if self.sign is None:
            self.sign = match is not None
        if self.region is None and match is not None:
            self.region = match["region"]

    # ------------------------------------------------------------------ transport

    def _signed_headers(
        self, method: str, url: str, data: bytes | None, headers: dict[str, str]
    ) -> dict[str, str]:
        import botocore.session
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.exceptions import BotoCoreError

        try:
            session = botocore.session.Session()
            if self._credentials is None:
                self._credentials = session.get_credentials()
        except BotoCoreError as exc:  # a profile that is not there, half a key pair (QA: internal errors)
            raise ApiError(0, {"title": "cannot sign the request", "detail": str(exc)}) from None
        if self._credentials is None:
            raise ApiError(
                0, {"title": "no AWS credentials", "detail": "SigV4 signing needs the AWS credential chain"}
            )
        region = self.region or session.get_config_variable("region") or "us-east-1"
        if not _REGION.fullmatch(region):  # it goes into the Authorization header's credential scope
            raise ClientInputError(
                f"the signing region {region[:80]!r} (--region, else the AWS configuration) is not a"
                " region name (letters, digits and '-')"
            )
        request = AWSRequest(method=method, url=url, data=data or b"", headers=headers)
        SigV4Auth(self._credentials.get_frozen_credentials(), "execute-api", region).add_auth(request)
        return {key: str(value) for key, value in request.headers.items()}

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        repeatable_post: bool = False,
        answers: str | tuple[str, ...] | None = None,
    ) -> Reply:
        """Send one request (again as :attr:`retry` says); return the reply, or raise
        :class:`ApiError` for a 4xx/5xx, :class:`UnansweredError` when there was no answer.
        ``repeatable_post``: a POST the API makes idempotent itself (a batch, by job id), sent
        again when its answer was lost, as a keyed one is. ``answers``: the field every answer
        of the API to it holds; a success without it is not the API's (QA28: an internal error
        of the command, KeyError, and with -o json the other service's JSON printed, exit 0);
        a tuple: that field, then those of the object it is, or of each of its ``items``."""
        params = {k: v for k, v in (query or {}).items() if v is not None}
        for key, value in params.items():
            _check_text(f"the query parameter {key}", str(value))
        url = self.endpoint + path + (f"?{urlencode(params)}" if params else "")
        sent = {"Accept": "application/json", **(headers or {})}
        data = None
        if body is not None:
            try:
                data = json.dumps(body, allow_nan=False).encode()
            except RecursionError:  # (QA21: an internal error)
                raise ClientInputError("the request body is nested too deeply to send as JSON") from None
            except ValueError as exc:
                raise ClientInputError(f"the request body holds a value JSON cannot carry: {exc}") from None
            sent["Content-Type"] = "application/json"
        if self.tenant:
            sent["X-Punctual-Tenant"] = self.tenant
        for name, value in sent.items():  # checked before anything is sent or signed
            check_header_value(name, value)
        began = self.retry.clock()
        for attempt in itertools.count(1):
            signed = sent
            if self.sign:  # each try signed anew: a signature is good for minutes only
                signed = self._signed_headers(method, url, data, sent)
                for name, value in signed.items():  # what the signature added (from the environment)
                    check_header_value(name, value)
            try:
                reply = self._send(method, url, data, signed)
                if answers is not None and not _answered(reply.body, answers):
                    raise self._not_the_api(reply.status, _shown_body(reply.body))
                return reply
            except ApiError as exc:
                wait = _retry_wait(self.retry, exc, method, sent, attempt, began, repeatable_post)
                if wait is None:
                    raise
            self.retry.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, method: str, url: str, data: bytes | None, sent: dict[str, str]) -> Reply:
        request = urllib.request.Request(url, data=data, headers=sent, method=method)
        try:
            with _OPENER.open(request, timeout=self.timeout_s) as response:
                reply = Reply(response.status, dict(response.headers.items()), _parse(response.read()))
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:  # never followed: the request's credentials would go along
                where = exc.headers.get("Location", "elsewhere")
                detail = f"the endpoint answered {exc.code}, a redirect to {where} (not followed)"
                raise ApiError(0, {"title": f"redirected from {self.endpoint}", "detail": detail}) from None
            try:
                raw = exc.read()
            except (OSError, http.client.HTTPException):  # its body cut short (a timeout is an OSError)
                raw = b""  # (review: escaped the command as a traceback)
            parsed = _parse(raw)
            if isinstance(parsed, dict) and not PROBLEM_FIELDS & parsed.keys():
                # JSON, but no error the API (or API Gateway) answers: another service on that port
                # (QA22: local mode's webhook receiver, one port over, was "404 error")
                raise self._not_the_api(exc.code, json.dumps(parsed)) from None
            if parsed is not None and not isinstance(parsed, dict) and exc.code < 500 and exc.code != 429:
                # A page or text: the API's errors (and API Gateway's) are JSON objects. 5xx and
                # 429 stay what they are, retried (a load balancer's 502 page), shown without markup
                raise self._not_the_api(exc.code, _shown_body(parsed)) from None
            problem = (
                parsed if isinstance(parsed, dict) else {"title": exc.reason, "detail": _shown_body(parsed)}
            )
            raise ApiError(exc.code, problem, dict(exc.headers.items())) from None
        except TimeoutError:  # connected and sent; no answer in time (a connect timeout is a URLError)
            # (QA17: "cannot reach", as a refused connection, while a create may have been made)
            detail = f"no answer in {self.timeout_s:g} s; the request was sent and may have been done"
            problem = {"title": f"{_shown(self.endpoint)} timed out", "detail": detail}
            raise UnansweredError(problem, sent=True) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            detail = str(reason) or type(reason).__name__
            # urllib wraps in a URLError what fails before the answer is awaited (connect, DNS, send)
            reached = not isinstance(exc, urllib.error.URLError)
            problem = {"title": f"cannot reach {_shown(self.endpoint)}", "detail": detail}
            if reached:  # (as a timeout: not "cannot reach" for what the API may have done)
                problem = {
                    "title": f"{_shown(self.endpoint)} gave no answer",
                    "detail": f"{detail}; the request was sent and may have been done",
                }
            raise UnansweredError(problem, sent=reached) from None
        if isinstance(reply.body, str) or (method == "GET" and not isinstance(reply.body, dict)):
            # (QA: an "internal error" of the command); every read of the API answers an object
            raise self._not_the_api(reply.status, str(reply.body))
        return reply

    def _not_the_api(self, status: int, body: str) -> ApiError:
        detail = f"it answered {status} with what the API never answers: {body[:80]}"
        return ApiError(0, {"title": f"{_shown(self.endpoint)} is not Punctual's API", "detail": detail})

    # ------------------------------------------------------------------ jobs

    def create_job(self, spec: Mapping[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": once_key(idempotency_key)}  # made when none is given: retried once
        job: dict[str, Any] = self.request("POST", "/v1/jobs", dict(spec), headers=headers, answers=JOB).body
        return job

    def create_job_at(self, job_id: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Create the job at ``job_id`` (``PUT`` with ``If-None-Match: *``): 412 when the id is taken."""
        headers = {"If-None-Match": "*"}
        job: dict[str, Any] = self.request(
            "PUT", f"/v1/jobs/{_seg(job_id)}", dict(spec), headers=headers, answers=JOB
        ).body
        return job

    def create_job_batch(self, jobs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """Up to 500 jobs, ``{id: spec}``, in one request: ``{results, created, exists, failed}``,
        each validated on its own; repeated, it makes only the ids not made yet (``exists``)."""
        body = {"jobs": [{"id": job_id, "job": dict(spec)} for job_id, spec in jobs.items()]}
        # A batch whose answer was lost (a timeout, API Gateway's 502/504) is sent again: the jobs
        # it made answer "exists" (their signing secrets were in the lost reply: rotate them).
        reply: dict[str, Any] = self.request(
            "POST", "/v1/job-batches", body, repeatable_post=True, answers="results"
        ).body
        return reply

    def list_jobs(
        self, state: str | None = None, tag: str | None = None, limit: int = 50, next_token: str | None = None
    ) -> dict[str, Any]:
        query = {"state": state, "tag": tag, "limit": limit, "next_token": next_token}
        page: dict[str, Any] = self.request("GET", "/v1/jobs", query=query, answers=JOB_PAGE).body
        return page

    def iter_jobs(
        self, state: str | None = None, tag: str | None = None, limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every job (at most ``limit``), following ``next_token`` until it is absent."""
        return follow_pages(lambda size, token: self.list_jobs(state, tag, size, token), limit)

    def get_job(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = self.request("GET", f"/v1/jobs/{_seg(job_id)}", answers=JOB).body
        return job

    def replace_job(
        self, job_id: str, spec: Mapping[str, Any], if_match: int | None = None
    ) -> dict[str, Any]:
        job: dict[str, Any] = self.request(
            "PUT", f"/v1/jobs/{_seg(job_id)}", dict(spec), headers=_if(if_match), answers=JOB
        ).body
        return job

    def delete_job(self, job_id: str, if_match: int | None = None) -> None:
        self.request("DELETE", f"/v1/jobs/{_seg(job_id)}", headers=_if(if_match))

    def pause_job(self, job_id: str, if_match: int | None = None) -> dict[str, Any]:
        job: dict[str, Any] = self.request(
            "POST", f"/v1/jobs/{_seg(job_id)}/pause", headers=_if(if_match), answers=JOB
        ).body
        return job

    def resume_job(self, job_id: str, if_match: int | None = None) -> dict[str, Any]:
        job: dict[str, Any] = self.request(
            "POST", f"/v1/jobs/{_seg(job_id)}/resume", headers=_if(if_match), answers=JOB
        ).body
        return job

    def rotate_secret(
        self, job_id: str, drop_previous: bool = False, if_match: int | None = None
    ) -> dict[str, Any]:
        """A new webhook signing secret (in the reply's ``signing_secret``, shown once); the previous
        one signs too until the next rotation. ``drop_previous``: only end the previous one's
        signing (no new secret: ``signing_secret`` is null)."""
        query = {"drop_previous": "true"} if drop_previous else None
        job: dict[str, Any] = self.request(
            "POST", f"/v1/jobs/{_seg(job_id)}/rotate-secret", query=query, headers=_if(if_match), answers=JOB
        ).body
        return job

    def trigger_job(self, job_id: str, idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": once_key(idempotency_key)}  # made when none is given: retried once
        accepted: dict[str, Any] = self.request(
            "POST", f"/v1/jobs/{_seg(job_id)}/trigger", headers=headers, answers="slot"
        ).body
        return accepted

    # ------------------------------------------------------------------ executions

    def list_executions(
        self, job_id: str, status: str | None = None, limit: int = 50, next_token: str | None = None, **q: Any
    ) -> dict[str, Any]:
        query = {"status": status, "limit": limit, "next_token": next_token, **q}  # q: since, until
        page: dict[str, Any] = self.request(
            "GET", f"/v1/jobs/{_seg(job_id)}/executions", query=query, answers=RUN_PAGE
        ).body
        return page

    def iter_executions(
        self, job_id: str, status: str | None = None, limit: int | None = None, **span: Any
    ) -> Iterator[dict[str, Any]]:
        """The job's executions, newest slot first (at most ``limit``; ``since``, ``until``), following
        ``next_token`` until it is absent (a page filtered by ``status`` may be short, even empty)."""
        return follow_pages(lambda size, at: self.list_executions(job_id, status, size, at, **span), limit)

    def get_execution(self, job_id: str, slot: str) -> dict[str, Any]:
        execution: dict[str, Any] = self.request(
            "GET", f"/v1/jobs/{_seg(job_id)}/executions/{_seg(slot)}", answers=RUN
        ).body
        return execution

    def list_alerts(self, job_id: str, limit: int = 50) -> dict[str, Any]:
        """The job's last alerts, newest slot first (``GET /v1/jobs/{id}/alerts``)."""
        alerts: dict[str, Any] = self.request(
            "GET", f"/v1/jobs/{_seg(job_id)}/alerts", query={"limit": limit}, answers=ALERT_PAGE
        ).body
        return alerts

    def upcoming(self, job_id: str, count: int = 10) -> dict[str, Any]:
        """The job's next slots, as its chain releases them (``GET /v1/jobs/{id}/upcoming``)."""
        reply: dict[str, Any] = self.request(
            "GET", f"/v1/jobs/{_seg(job_id)}/upcoming", query={"count": count}, answers="slots"
        ).body
        return reply

    # ------------------------------------------------------------------ calendars and backfills

    def put_calendar(self, name: str, spec: Mapping[str, Any], if_match: int | None = None) -> dict[str, Any]:
        calendar: dict[str, Any] = self.request(
            "PUT", f"/v1/calendars/{_seg(name)}", dict(spec), headers=_if(if_match), answers=CALENDAR
        ).body
        return calendar

    def get_calendar(self, name: str) -> dict[str, Any]:
        calendar: dict[str, Any] = self.request("GET", f"/v1/calendars/{_seg(name)}", answers=CALENDAR).body
        return calendar

    def list_calendars(self, limit: int = 50, next_token: str | None = None) -> dict[str, Any]:
        query = {"limit": limit, "next_token": next_token}
        page: dict[str, Any] = self.request("GET", "/v1/calendars", query=query, answers=CALENDAR_PAGE).body
        return page

    def iter_calendars(self, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """Every calendar (at most ``limit``), following ``next_token`` until it is absent."""
        return follow_pages(self.list_calendars, limit)

    def delete_calendar(self, name: str, if_match: int | None = None) -> None:
        self.request("DELETE", f"/v1/calendars/{_seg(name)}", headers=_if(if_match))

    def backfill_job(
        self,
        job_id: str,
        start: str,
        end: str,
        include_dependants: bool = False,
        max_parallel: int | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"start": start, "end": end, "include_dependants": include_dependants}
        if max_parallel is not None:
            body["max_parallel"] = max_parallel
        backfill: dict[str, Any] = self.request(
            "POST", f"/v1/jobs/{_seg(job_id)}/backfill", body, answers="id"
        ).body
        return backfill

    def get_backfill(self, job_id: str, backfill_id: str) -> dict[str, Any]:
        backfill: dict[str, Any] = self.request(
            "GET", f"/v1/jobs/{_seg(job_id)}/backfills/{_seg(backfill_id)}", answers="id"
        ).body
        return backfill

    def cancel_backfill(self, job_id: str, backfill_id: str) -> dict[str, Any]:
        backfill: dict[str, Any] = self.request(
            "DELETE", f"/v1/jobs/{_seg(job_id)}/backfills/{_seg(backfill_id)}", answers="id"
        ).body
        return backfill

    def preview(
        self,
        expression: str,
        timezone: str = "UTC",
        count: int = 5,
        after: str | None = None,
        calendars: Sequence[str] = (),
        show_excluded: bool = False,
        dst_gap: str | None = None,
        dst_repeat: str | None = None,
    ) -> dict[str, Any]:
        """The next slots of ``expression`` after ``after`` (RFC 3339; default now), passing over
        the days of the caller's ``calendars`` (with ``show_excluded``: listing those passed over),
        with a job's ``dst`` options (``dst_gap``, ``dst_repeat``)."""
        query = {"expression": expression, "timezone": timezone, "count": count, "after": after}
        query.update({"dst_gap": dst_gap, "dst_repeat": dst_repeat})
        if calendars:
            query["calendars"] = ",".join(calendars)
        if show_excluded:
            query["show_excluded"] = "true"
        preview: dict[str, Any] = self.request(
            "GET", "/v1/schedules/preview", query=query, answers="slots"
        ).body
        return preview


def _retry_wait(
    policy: RetryPolicy,
    exc: ApiError,
    method: str,
    headers: Mapping[str, str],
    attempt: int,
    began: float,
    repeatable_post: bool = False,
) -> float | None:
    """How long to wait before sending the request again after ``exc`` (None: not again)."""
    if attempt >= policy.max_attempts:
        return None

    def again(sent: bool) -> bool:
        return repeatable_post or repeatable(method, headers, sent)

    if exc.status in RETRIED_STATUSES or in_progress(exc.status, exc.problem, headers):
        asked = exc.retry_after_s  # nothing was done (or a keyed request's first is still running)
    elif isinstance(exc, UnansweredError) and again(exc.sent):
        asked = None
    elif (exc.status in LOST_ANSWER_STATUSES or gateway_500(exc.status, exc.problem)) and again(True):
        asked = exc.retry_after_s
    else:
        return None
    wait = asked if asked is not None else policy.backoff(attempt - 1)
    return wait if policy.clock() - began + wait <= policy.deadline_s else None


PAGE_SIZE = 100  # the most a page of any listing holds


def follow_pages(
    fetch: Callable[[int, str | None], dict[str, Any]], limit: int | None = None
) -> Iterator[dict[str, Any]]:
    """The items of the pages ``fetch(size, next_token)`` answers, until there is no ``next_token``
    or ``limit`` items were given (None: no limit)."""
    if limit is not None and limit < 0:
        raise ClientInputError(f"limit must not be negative, got {limit}")
    given, token = 0, None
    seen: set[str] = set()
    while limit is None or given < limit:
        size = PAGE_SIZE if limit is None else min(PAGE_SIZE, limit - given)
        page = fetch(size, token)
        for item in page["items"][: None if limit is None else limit - given]:
            given += 1
            yield item
        token = page.get("next_token")
        if not token:
            return
        if token in seen:  # (a listing that never ends: the same pages again and again, forever)
            detail = f"next_token {str(token)[:40]!r} came back after {given} item(s); stopped there"
            raise ApiError(0, {"title": "the API gave a page token it gave before", "detail": detail})
        seen.add(token)


_HEADER_SOURCES = {
    "x-punctual-tenant": "the tenant (--tenant, PUNCTUAL_TENANT)",
    "idempotency-key": "the idempotency key (--idempotency-key)",
}


def check_header_value(name: str, value: str) -> None:
    """Raise :class:`ClientInputError` naming what gave ``value`` when an HTTP header cannot carry it.

    A header holds printable Latin-1 text (QA21: the HTTP library encodes it as Latin-1 and refuses
    a line break: a tenant or an idempotency key beyond that was an internal error of the command).
    """
    for char in value:
        if " " <= char <= "~" or "\xa0" <= char <= "\xff":
            continue
        what = _HEADER_SOURCES.get(name.lower(), f"the value of {name}")
        if char < " " or "\x7f" <= char <= "\x9f":
            problem = f"a control character (U+{ord(char):04X})"
        else:
            problem = f"{char!r} (U+{ord(char):04X}), a character outside Latin-1"
        raise ClientInputError(f"{what} cannot be sent as an HTTP header: it has {problem}")


def _seg(value: str) -> str:
    """One path segment, URL-encoded (slot keys carry ':' and '~'); never empty."""
    if not value:
        raise ClientInputError("a job id or slot must not be empty")
    _check_text("a path segment", value)
    return quote(value, safe="")


def _check_text(what: str, value: str) -> None:
    """A value sent in the URL is UTF-8 encoded: text holding bytes that are not UTF-8 (an argument
    read with surrogate escapes) cannot be (QA21: an internal error)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ClientInputError(f"{what} {value[:80]!r} is not UTF-8 text") from None


def _if(version: int | None) -> dict[str, str] | None:
    return {"If-Match": f'"{version}"'} if version is not None else None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are answered, not followed (QA: a read followed one to another host with the
    tenant header and the request's SigV4 credentials, and printed that host's answer)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


def _shown(endpoint: str) -> str:
    """An endpoint as an error names it: without a user and password in it (also one that does
    not parse: QA24, its refusals printed them)."""
    return _USERINFO.sub(r"\1", endpoint)


def _answered(body: Any, answers: str | tuple[str, ...]) -> bool:
    """Whether ``body`` is an answer of the API: an object with ``answers`` (its first field, then
    the fields of the object, or of each object of ``items``, a listing's)."""
    field, *held = (answers,) if isinstance(answers, str) else answers
    if not (isinstance(body, dict) and field in body):
        return False
    objects = body[field] if field == "items" else [body]
    return isinstance(objects, list) and all(
        isinstance(each, dict) and all(name in each for name in held) for each in objects
    )


_MARKUP = re.compile(r"<(script|style)\b.*?</\1\s*>|<!--.*?-->|<[^>]*>", re.IGNORECASE | re.DOTALL)


def _shown_body(body: Any) -> str:
    """An answer's body as one short line: JSON as sent, a page's text without its markup
    (QA: a web server's 404 page was shown whole, ``<!DOCTYPE HTML> <html lang=...``)."""
    if body is None:
        return ""
    if not isinstance(body, str):
        return json.dumps(body)
    return " ".join(html.unescape(_MARKUP.sub(" ", body)).split())


def _parse(data: bytes) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")
