"""Clients of the AWS targets: made per service, region, call timeouts and execution role.

Every adapter takes a *client factory*, a callable ``clients(service, timeouts=...)``
returning a boto3 client, so tests and local mode pass endpoint-configured clients.
When the target ARN names a region other than the client's, the factory is asked
again as ``clients(service, region, timeouts=...)``; :class:`Boto3ClientFactory`
supports both (its boto3 sessions come from :mod:`punctual.runtime.aws`).

Every call is bounded by the job's timeout (``ctx.timeout_s``): ``timeouts`` is a
:class:`CallTimeouts` (socket connect and read timeouts, SDK attempts) that the
factory builds the client with, derived from the timeout by
:func:`lambda_wait_timeouts` for a synchronous Lambda Invoke (read timeout
``min(timeout, 900) + 5 s``) and by :func:`api_call_timeouts` for every other call
(connect, read, SDK retries and their back-off together within ``min(timeout, 60 s)``).
A call cut off by them is a retryable, timed-out result.

Execution roles (EventBridge Scheduler's semantics): a target with ``role_arn`` is called
with that role's credentials. The worker assumes it (``sts:AssumeRole`` with
``ExternalId`` = the tenant's id and the session tag ``punctual-tenant``), and the
credentials are kept and refreshed before they expire (botocore's refreshable
credentials: a few minutes ahead). A target without one is called with the deployment's
target role (``PUNCTUAL_TARGET_ROLE_ARN``: only the operator's ``targetArnPatterns``,
every own resource denied), or, where none is set (local mode), the worker's own
credentials. See :class:`AssumedRole`.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

from punctual.delivery.targets.base import SlotContext
from punctual.runtime import aws

# Call timeouts (see CallTimeouts).
LAMBDA_MAX_RUN_S = 900.0  # the longest a Lambda function can run
LAMBDA_READ_MARGIN_S = 5.0  # lets a function's own time-out answer arrive before ours cuts it off
API_CALL_BUDGET_S = 60.0  # an API call (not a synchronous Invoke) never needs longer, SDK retries included
API_CONNECT_S = 5.0
API_READ_S = 30.0
SDK_ATTEMPTS = 3  # "standard" retry mode, when the budget holds three tries
# Standard-mode back-off before the 2nd and 3rd try: at most 1 s and 2 s for throttling,
# each raised by at most 5 s more when the service sends x-amz-retry-after.
SDK_BACKOFF_S = 13.0
MAX_CACHED_CLIENTS = 128


@dataclass(frozen=True)
class CallTimeouts:
    """How long one AWS call may take: socket timeouts and SDK attempts.

    Attributes
    ----------
    connect_s : float
        Socket connect timeout of each try.
    read_s : float
        Socket read timeout of each try (AWS answers in one piece, so it bounds the
        wait for the answer).
    max_attempts : int
        Tries in all, the first included (botocore's ``total_max_attempts``).
    """

    connect_s: float
    read_s: float
    max_attempts: int = 1

    @property
    def worst_case_s(self) -> float:
        """The longest the call can take: every try timing out, plus the SDK's back-off."""
        backoff = SDK_BACKOFF_S if self.max_attempts > 1 else 0.0
        return self.max_attempts * (self.connect_s + self.read_s) + backoff

    def config(self) -> Any:
        """The botocore ``Config`` of a client that keeps to these timeouts."""
        from botocore.config import Config

        return Config(
            connect_timeout=self.connect_s,
            read_timeout=self.read_s,
            retries={"mode": "standard", "total_max_attempts": self.max_attempts},
            max_pool_connections=32,
        )


def api_call_timeouts(timeout_s: float, *, sdk_retries: bool = True) -> CallTimeouts:
    """Timeouts of an AWS API call made for a job with ``timeout_s``.

    The call's budget is ``min(timeout_s, 60 s)``. With 60 s the SDK tries three
    times (throttling and 5xx are retried at once, as before) and the three tries
    and the back-off between them fit in the budget; with less, or without
    ``sdk_retries``, it tries once and the one try gets the whole budget. Each try
    gives the connect at most 5 s and half its share, and the answer the rest, at
    most 30 s.

    Parameters
    ----------
    timeout_s : float
        The job's timeout (``SlotContext.timeout_s``).
    sdk_retries : bool, default True
        False for calls the SDK must not repeat (a Lambda ``Event`` Invoke would
        queue the function twice).

    Returns
    -------
    CallTimeouts
        ``worst_case_s`` never exceeds the budget.
    """
    budget = max(min(float(timeout_s), API_CALL_BUDGET_S), 0.002)
    if sdk_retries and budget >= API_CALL_BUDGET_S:
        attempts = SDK_ATTEMPTS
        per_try = min(API_CONNECT_S + API_READ_S, (budget - SDK_BACKOFF_S) / attempts)
    else:
        attempts = 1
        per_try = min(API_CONNECT_S + API_READ_S, budget)
    connect = min(API_CONNECT_S, per_try / 2)
    return CallTimeouts(_floor_ms(connect), _floor_ms(per_try - connect), attempts)


def lambda_wait_timeouts(timeout_s: float, margin_s: float = LAMBDA_READ_MARGIN_S) -> CallTimeouts:
    """Timeouts of a synchronous (``RequestResponse``) Lambda Invoke for a job with ``timeout_s``.

    The answer is awaited ``min(timeout_s, 900) + margin_s``: no function runs
    longer than 900 s, and the margin lets a function whose own timeout equals the
    job's report its time-out before the client gives up. One try: the SDK must not
    start the function again while the first run may still be going.
    """
    timeout = max(float(timeout_s), 0.002)
    connect = min(API_CONNECT_S, timeout / 2)
    return CallTimeouts(_floor_ms(connect), _floor_ms(min(timeout, LAMBDA_MAX_RUN_S) + margin_s), 1)


def _floor_ms(seconds: float) -> float:
    return max(int(seconds * 1000) / 1000, 0.001)


ROLE_SESSION_S = 3600  # credentials of an assumed role last an hour, refreshed before expiry
MAX_CACHED_ROLES = 256


@dataclass(frozen=True)
class AssumedRole:
    """A role the factory assumes before building a client.

    Attributes
    ----------
    role_arn : str
        The role.
    external_id : str or None
        ``sts:ExternalId`` (a job's execution role: the tenant's id; the deployment's own
        target role: none).
    tenant : str
        Tagged on the session as ``punctual-tenant`` and named in the session name, so the
        role's CloudTrail entries say whose job made the call.
    """

    role_arn: str
    external_id: str | None = None
    tenant: str = ""

    def assume_request(self) -> dict[str, Any]:
        """The ``sts:AssumeRole`` parameters."""
        digest = hashlib.sha256(self.tenant.encode()).hexdigest()[:16]
        request: dict[str, Any] = {
            "RoleArn": self.role_arn,
            "RoleSessionName": f"punctual-{digest}",
            "DurationSeconds": ROLE_SESSION_S,
        }
        if self.external_id is not None:
            request["ExternalId"] = self.external_id
        if self.tenant:
            # Tag values allow letters, digits, spaces and _.:/=+-@; a tenant id is made of those.
            request["Tags"] = [{"Key": "punctual-tenant", "Value": self.tenant[:256]}]
        return request


def role_for(target: Any, ctx: SlotContext, default_role_arn: str = "") -> AssumedRole | None:
    """The role a target is called with: its ``role_arn`` (tenant's external id), else the default."""
    role_arn = getattr(target, "role_arn", None)
    if role_arn:
        return AssumedRole(str(role_arn), external_id=ctx.tenant, tenant=ctx.tenant)
    if default_role_arn:
        return AssumedRole(default_role_arn, external_id=None, tenant=ctx.tenant)
    return None


class ClientFactory(Protocol):
    """Returns a boto3 client for a service (and, when asked, a region).

    Adapters call it as ``clients(service, timeouts=t)`` and, for a target in another
    region, ``clients(service, region, timeouts=t)``. A factory that honours
    ``timeouts`` (:class:`Boto3ClientFactory` does) returns a client configured with
    them; one that ignores them (a test's stub) gives up the bound.
    """

    def __call__(self, service: str, /, *args: Any, **kwargs: Any) -> Any: ...


class Boto3ClientFactory:
    """The default :class:`ClientFactory`: cached boto3 clients per service, region and timeouts.

    Asked with ``timeouts`` (a :class:`CallTimeouts`), it returns a client built
    with exactly those socket timeouts and SDK attempts; the adapters derive them
    from each job's timeout, so no call outlives the job. The clients are cached
    (the least recently used beyond :data:`MAX_CACHED_CLIENTS` are dropped): jobs
    share a few timeouts, and a client per timeout costs one creation.

    Without ``timeouts``, SDK retries stay on for every service but Lambda: a
    synchronous Invoke that times out on the client side may still be running, and
    the SDK would start it again. Lambda throttles come back as retryable results
    instead.

    Parameters
    ----------
    session : boto3.session.Session, optional
        Defaults to a new session (environment credentials and region).
    endpoint_url : str, optional
        One endpoint for every service (local mode: moto server).
    region_name : str, optional
        Default region when the caller does not name one.
    """

    def __init__(
        self,
        session: Any | None = None,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        default_role_arn: str = "",
    ) -> None:
        self._session = session or aws.session(region_name)
        self._endpoint_url = endpoint_url
        self._region = region_name or self._session.region_name
        self.default_role_arn = default_role_arn
        self._clients: OrderedDict[tuple[str, str | None, CallTimeouts, AssumedRole | None], Any] = (
            OrderedDict()
        )
        self._role_sessions: OrderedDict[AssumedRole, Any] = OrderedDict()
        self._lock = threading.Lock()  # boto3 sessions are not thread-safe for client creation

    def _session_for(self, role: AssumedRole) -> Any:
        """A session whose credentials come from assuming ``role``, refreshed before they expire."""
        session = self._role_sessions.get(role)
        if session is not None:
            self._role_sessions.move_to_end(role)
            return session
        sts = self._session.client("sts", region_name=self._region, endpoint_url=self._endpoint_url)

        def fetch() -> dict[str, str]:
            credentials = sts.assume_role(**role.assume_request())["Credentials"]
            return {
                "access_key": credentials["AccessKeyId"],
                "secret_key": credentials["SecretAccessKey"],
                "token": credentials["SessionToken"],
                "expiry_time": credentials["Expiration"].isoformat(),
            }

        session = aws.assumed_role_session(fetch, self._region)
        self._role_sessions[role] = session
        while len(self._role_sessions) > MAX_CACHED_ROLES:
            self._role_sessions.popitem(last=False)
        return session

    def __call__(
        self,
        service: str,
        region: str | None = None,
        *,
        timeouts: CallTimeouts | None = None,
        role: AssumedRole | None = None,
    ) -> Any:
        region = region or self._region
        if timeouts is None:
            timeouts = (
                lambda_wait_timeouts(LAMBDA_MAX_RUN_S)
                if service == "lambda"
                else CallTimeouts(API_CONNECT_S, API_READ_S, SDK_ATTEMPTS)
            )
        key = (service, region, timeouts, role)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                session = self._session if role is None else self._session_for(role)
                client = session.client(
                    service, region_name=region, endpoint_url=self._endpoint_url, config=timeouts.config()
                )
                self._clients[key] = client
                while len(self._clients) > MAX_CACHED_CLIENTS:
                    self._clients.popitem(last=False)
            else:
                self._clients.move_to_end(key)
            return client


def target_client(
    clients: ClientFactory, service: str, region: str, timeouts: CallTimeouts, role: AssumedRole | None = None
) -> Any:
    # ``role`` is passed only when there is one: factories written before roles keep working.
    extra: dict[str, Any] = {"role": role} if role is not None else {}
    client = clients(service, timeouts=timeouts, **extra)
    client_region = getattr(getattr(client, "meta", None), "region_name", None)
    if region and client_region and client_region != region:
        client = clients(service, region, timeouts=timeouts, **extra)
    return client


def api_client(clients: ClientFactory, service: str, region: str, target: Any, ctx: SlotContext) -> Any:
    """The client of an API call for ``target`` (:func:`api_call_timeouts`, the target's role)."""
    return target_client(
        clients, service, region, api_call_timeouts(ctx.timeout_s), target_role(clients, target, ctx)
    )


def target_role(clients: ClientFactory, target: Any, ctx: SlotContext) -> AssumedRole | None:
    """The target's execution role, else the factory's default target role (if it has one)."""
    return role_for(target, ctx, str(getattr(clients, "default_role_arn", "") or ""))
