"""Builds what the API's routes call, from :class:`~punctual.runtime.settings.Settings`, once per container.

:func:`services` is cached: a warm Lambda container (or the local server) reuses the boto3
clients, the store and the job service. Tests build their own with :func:`build_services`
inside a moto mock and install them with :func:`use_services`.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from punctual.api.paging import TokenCodec
from punctual.dispatch.load_forecast import LoadForecast
from punctual.dispatch.queues import SqsQueues
from punctual.models import HttpTarget, JobSpec
from punctual.runtime.clock import Clock, SystemClock
from punctual.runtime.settings import Settings
from punctual.security.boundary import Boundary
from punctual.security.message_auth import signer_from
from punctual.security.ownership import OwnResources, own_resources
from punctual.security.tenant_quotas import PeakQuota, backfill_quota, peak_limits
from punctual.store.base import JobStore
from punctual.store.dynamo import DynamoStore
from punctual.store.keyring import TenantKeyRepository
from punctual.usecases.backfill_runner import BackfillRunner
from punctual.usecases.calendar_service import CalendarService
from punctual.usecases.job_errors import InvalidJobError
from punctual.usecases.jobs import JobService
from punctual.usecases.registration import SecretBox

logger = logging.getLogger(__name__)

IDEMPOTENCY_TTL_S = 24 * 3600  # how long a retried request is answered with its first reply


@dataclass
class Services:
    """Everything a request needs, built once.

    Attributes
    ----------
    settings
        The validated configuration.
    jobs
        The job use cases.
    store
        The job store (the API reads execution history from it directly).
    tokens
        Paging token codec.
    dynamodb
        The low-level DynamoDB client, shared with the idempotency records.
    reply_box
        Encrypts a signing secret inside a stored idempotent reply (None: replies keep none).
    """

    settings: Settings
    jobs: JobService
    store: JobStore
    tokens: TokenCodec
    dynamodb: Any
    reply_box: Any | None = None
    allow_cidrs: tuple[str, ...] = field(default_factory=tuple)
    calendars: CalendarService | None = None
    backfills: BackfillRunner | None = None

    def calendar_service(self) -> CalendarService:
        """The calendar use cases (built from the job service's store and clock when not given)."""
        if self.calendars is None:
            self.calendars = CalendarService(self.store, self.jobs.clock)
        return self.calendars

    def backfill_runner(self) -> BackfillRunner:
        """The backfill use cases (built from the job service's parts when not given)."""
        if self.backfills is None:
            jobs = self.jobs
            self.backfills = BackfillRunner(
                self.store,
                jobs.queues,
                jobs.clock,
                jobs.layout,
                jobs.routing,
                max_parallel=self.settings.backfill_max_parallel,
                max_slots=self.settings.backfill_max_slots,
                step_s=self.settings.backfill_step_s,
                quota=backfill_quota(self.store, self.settings),
            )
        return self.backfills

    def admit(self, tenant: str) -> None:
        """Count one request of ``tenant`` against its per-minute API quota.

        One conditional write per request on the tenant's counter of the current minute
        (expiring a day later). Every Lambda container counts into the same item, so the
        quota holds for the tenant whatever the number of containers.

        Raises
        ------
        RateLimitedError
            The tenant reached ``PUNCTUAL_API_REQUESTS_PER_MINUTE_PER_TENANT`` this minute.
        """
        limit = self.settings.api_requests_per_minute_per_tenant
        if limit <= 0:
            return
        now = self.jobs.clock.now()
        epoch_s = int(now.timestamp())
        window = now.strftime("%Y-%m-%dT%H:%MZ")
        if not self.store.count_request(tenant, window, limit, epoch_s + IDEMPOTENCY_TTL_S):
            from punctual.api.problems import RateLimitedError

            raise RateLimitedError(limit, 60 - epoch_s % 60)

    def check_spec(self, spec: JobSpec) -> None:
        """Refuse a webhook URL the workers would refuse to call (SSRF guard), at registration.

        Host names are not resolved here (no network on the request path): literal
        addresses and ``localhost`` names are checked now, resolved addresses at each call.
        """
        if not isinstance(spec.target, HttpTarget):
            return
        from punctual.delivery.targets.webhooks.guard import BlockedTargetError, guard_url

        try:
            guard_url(spec.target.url, self.allow_cidrs, resolve=False)
        except BlockedTargetError as exc:
            raise InvalidJobError(str(exc), field="target.url") from None
        except ValueError as exc:  # an allow-list the operator mistyped
            logger.error("PUNCTUAL_TARGET_ALLOW_CIDRS is invalid: %s", exc)
            raise


def _secret_boxes(
    settings: Settings, keys: TenantKeyRepository, clock: Clock | None
) -> tuple[SecretBox | None, Any | None]:
    """The signing-secret box for jobs (sealing under the tenants' data keys, kept in ``keys``),
    and a second one (other context) for idempotent replies."""
    from punctual.runtime import aws
    from punctual.security.signing_secrets import SecretCipher, SecretsError
    from punctual.security.tenant_keys import TenantKeyring

    keyring = TenantKeyring(
        lambda: aws.client("kms"),
        settings.kms_key_id,
        keys,
        clock,
        lifetime_s=settings.tenant_key_lifetime_s,
    )
    try:
        jobs_box = SecretCipher(settings, keyring=keyring)
        reply_box = SecretCipher(settings, context={"purpose": "punctual-idempotent-reply"})
    except SecretsError as exc:
        logger.warning("webhook signing secrets are off: %s", exc)
        return None, None
    return jobs_box, reply_box


class TokenKeyError(RuntimeError):
    """No paging-token key is configured outside local mode."""


def token_key(settings: Settings, secrets_manager: Any | None = None) -> bytes:
    """The paging token HMAC key.

    ``PUNCTUAL_TOKEN_KEY`` when set (local mode writes a random one per state directory);
    else the Secrets Manager secret ``PUNCTUAL_TOKEN_KEY_SECRET`` that the stack generates at
    deploy (read once per container). Local mode alone may fall back to a key derived from the
    table name; a deployment without a key refuses to start rather than use a guessable one.

    Raises
    ------
    TokenKeyError
        Neither is set outside local mode.
    """
    if settings.token_key:
        return settings.token_key.encode()
    if settings.token_key_secret:
        if secrets_manager is None:
            from punctual.runtime import aws

            secrets_manager = aws.client("secretsmanager")
        value = secrets_manager.get_secret_value(SecretId=settings.token_key_secret)["SecretString"]
        return str(value).encode()
    if settings.local_mode:
        return hashlib.sha256(f"punctual-next-token/{settings.table_name}".encode()).digest()
    raise TokenKeyError(
        "no paging-token key: set PUNCTUAL_TOKEN_KEY_SECRET (the stack does) or PUNCTUAL_TOKEN_KEY"
    )


def build_services(
    settings: Settings,
    dynamodb: Any,
    sqs: Any,
    clock: Clock | None = None,
    secrets_manager: Any | None = None,
    own: OwnResources | None = None,
) -> Services:
    """Wire the API from settings and boto3 clients.

    Parameters
    ----------
    settings
        Configuration (``Settings.from_env()`` in a deployment).
    dynamodb, sqs
        boto3 clients (made inside the mock in tests).
    clock
        The source of ``now`` (default: the system clock with ``settings.clock_offset_s``).
    secrets_manager
        Reads the paging-token key secret (default: a boto3 client, when one is named).
    own
        The deployment's own resources (default: loaded from settings on first use).
    """
    layout = settings.layout()
    store = DynamoStore(
        dynamodb, settings.table_name, layout, settings.table_transactions, marks_scope=settings.marks_scope
    )
    jobs_box, reply_box = _secret_boxes(settings, store, clock)
    own_loader: Callable[[], OwnResources] = (
        (lambda: own) if own is not None else (lambda: own_resources(settings))
    )
    jobs = JobService(
        store=store,
        queues=SqsQueues(sqs, concurrency=settings.queue_send_concurrency, signer=signer_from(settings)),
        clock=clock or SystemClock(settings.clock_offset_s),
        layout=layout,
        routing=settings.routing(),
        max_jobs_per_tenant=settings.max_jobs_per_tenant,
        secrets=jobs_box,
        allow_cidrs=tuple(settings.target_allow_cidrs),
        own_resources=own_loader,
        require_target_role=settings.require_target_role,
        max_triggers_per_minute=settings.max_triggers_per_minute_per_tenant,
        boundary=Boundary.of(settings, own_loader),
        peaks=PeakQuota(store, peak_limits(settings)),
        forecast=LoadForecast(store, layout, head_s=float(settings.burst_lateness_target_s)),
    )
    return Services(
        settings=settings,
        jobs=jobs,
        store=store,
        tokens=TokenCodec(token_key(settings, secrets_manager)),
        dynamodb=dynamodb,
        reply_box=reply_box,
        allow_cidrs=tuple(settings.target_allow_cidrs),
    )


_lock = threading.Lock()
_services: Services | None = None


def services() -> Services:
    """The container's services, built on first use from the environment."""
    global _services
    with _lock:
        if _services is None:
            from punctual.runtime.composition import container

            built = container()
            _services = build_services(
                built.settings, built.client("dynamodb"), built.client("sqs"), clock=built.clock
            )
        return _services


def use_services(built: Services | None) -> None:
    """Install ``built`` as the container's services (None: rebuild from the environment)."""
    global _services
    if built is None:
        from punctual.runtime import composition

        composition.reset()  # the environment may have changed: read it again
    with _lock:
        _services = built
