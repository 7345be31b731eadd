"""``Idempotency-Key`` for ``POST /v1/jobs`` and ``POST /v1/jobs/{id}/trigger``.

Powertools' idempotency utility keeps one record per (tenant, route, key) in the jobs
table, in a partition per tenant (``idem#<tenant>``), for a day (``expires_at`` is the
table's TTL attribute). A retry with the same key answers the first reply; the same key
with a different body is refused (422, ``IdempotencyValidationError``); a retry while
the first is still running is a 409 with ``Retry-After``. A key's record that DynamoDB throttles
is a 503 with ``Retry-After`` (nothing was done); when only the record of a reply is lost, the
reply is still answered (the work was done: a 500 had the client do it again).

A stored create reply never holds a webhook signing secret in clear: it holds it
encrypted (a context of its own), and a replay decrypts it. Where the API may not
decrypt (a deployment that grants only ``kms:Encrypt``), a replay answers the job with
``signing_secret: null`` and logs why.

A keyed create makes its job at an id derived from (tenant, key), not a random one: when the
request died after the job was stored but before its reply was recorded (the Lambda cut off: the
key's in-progress mark lapses), the retry finds the job the first attempt made and answers it
(the same spec; another is the key reused, 422) instead of making a second job. The first
attempt's signing secret was never shown, so that answer rotates it and shows the new one.
A keyed trigger records its slot for the key before queuing it, so such a retry queues that slot
again (one run: SQS's deduplication and the execution's claim) instead of a second one.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
)

from punctual.api.wiring import IDEMPOTENCY_TTL_S, Services
from punctual.models import ACCEPTED, Job, JobSpec, JobState
from punctual.store.base import JobExistsError
from punctual.store.dynamo.sizes import check_reply_size

logger = logging.getLogger(__name__)


def _persistence(services: Services, tenant: str) -> DynamoDBPersistenceLayer:
    return DynamoDBPersistenceLayer(
        table_name=services.settings.table_name,
        key_attr="pk",
        sort_key_attr="sk",
        static_pk_value=f"idem#{tenant}",
        expiry_attr="expires_at",
        boto3_client=services.dynamodb,
    )


def _config(key_path: str, lambda_context: Any | None) -> IdempotencyConfig:
    config = IdempotencyConfig(
        event_key_jmespath=key_path,
        payload_validation_jmespath="body",
        raise_on_no_idempotency_key=True,
        expires_after_seconds=IDEMPOTENCY_TTL_S,
        hash_function="sha256",
    )
    if lambda_context is not None and hasattr(lambda_context, "get_remaining_time_in_millis"):
        # A request cut off by the Lambda timeout frees its key when the invocation ends.
        config.register_lambda_context(lambda_context)
    return config


def _once(
    services: Services,
    tenant: str,
    prefix: str,
    key_path: str,
    data: dict[str, Any],
    run: Callable[[], dict[str, Any]],
    lambda_context: Any | None,
) -> dict[str, Any]:
    done: dict[str, dict[str, Any]] = {}

    def call(request: dict[str, Any]) -> dict[str, Any]:
        done["reply"] = run()
        return done["reply"]

    wrapped = idempotent_function(
        call,
        data_keyword_argument="request",
        persistence_store=_persistence(services, tenant),
        config=_config(key_path, lambda_context),
        key_prefix=prefix,
    )
    try:
        result: dict[str, Any] = wrapped(request=data)
    except IdempotencyPersistenceLayerError as exc:
        if "reply" not in done:
            raise  # nothing was done (the key's record could not be written: problems answers why)
        # The work is done, only its record could not be written (DynamoDB throttled it): answer
        # it. A 500 here had the client retry, and once the key's in-progress mark lapsed the
        # retry did the work again (a second job).
        logger.warning("%s: reply not recorded for its Idempotency-Key: %s", prefix, exc)
        return done["reply"]
    return result


def create_job(
    services: Services,
    tenant: str,
    spec: JobSpec,
    key: str | None,
    lambda_context: Any | None = None,
    paused: bool = False,
) -> tuple[Job, str | None]:
    """Register ``spec`` (``paused``: stored paused); with a ``key``, a retry returns the job the
    first request made."""
    if key is None:
        return services.jobs.register(tenant, spec, paused=paused)
    check_reply_size(spec)  # the record of this reply must fit too: refused before the job is stored
    fresh: dict[str, str | None] = {}
    job_id = keyed_job_id(tenant, key)

    def run() -> dict[str, Any]:
        try:
            job, secret = services.jobs.register(tenant, spec, job_id=job_id, paused=paused)
        except JobExistsError:  # the first attempt made it, and died before its reply was recorded
            job, secret = _made_before(services, tenant, job_id, spec)
        fresh["secret"] = secret
        stored = None
        if secret is not None and services.reply_box is not None:
            stored = services.reply_box.encrypt(secret)
        return {"job": job.model_dump(mode="json"), "secret_enc": stored}

    body = spec.model_dump(mode="json")
    if paused:  # part of what a retry must repeat (absent otherwise: keys stored before it still match)
        body["state"] = "PAUSED"
    reply = _once(
        services,
        tenant,
        "create-job",
        "[tenant, key]",
        {"tenant": tenant, "key": key, "body": body},
        run,
        lambda_context,
    )
    job = Job.model_validate({**reply["job"], "tenant": tenant}, context=ACCEPTED)  # a reply it made
    if "secret" in fresh:
        return job, fresh["secret"]
    return job, _decrypt(services, reply.get("secret_enc"))


def keyed_job_id(tenant: str, key: str) -> str:
    """The id a create with Idempotency-Key ``key`` gives its job: 32 hex digits, as a random id."""
    return hashlib.sha256(f"punctual-job\x1f{tenant}\x1f{key}".encode()).hexdigest()[:32]


def _made_before(services: Services, tenant: str, job_id: str, spec: JobSpec) -> tuple[Job, str | None]:
    """The job a keyed create's first attempt made, for its retry: the same spec, or the key was
    used for another request. Its signing secret was never shown: a fresh one replaces it."""
    job = services.jobs.get(tenant, job_id)
    asked = JobSpec.model_validate(spec.model_dump(), context=ACCEPTED)
    if job.state is JobState.DELETED or job.spec() != asked:
        raise IdempotencyValidationError(f"job {job_id} was made for this key with another request")
    if job.signing_secret_enc is None or services.jobs.secrets is None:
        return job, None
    return services.jobs.rotate_secret(tenant, job_id, expected_version=job.version)


def _first_trigger_slot(services: Services, tenant: str, job_id: str, key: str, slot: str) -> str:
    """The slot a keyed trigger of ``job_id`` made first: ``slot``, recorded for the key before it
    is queued, or the one an earlier attempt recorded (it died before its reply was: the key's
    in-progress mark lapsed, and a retry at another instant would have made a second slot)."""
    digest = hashlib.sha256(f"{job_id}\x1f{key}".encode()).hexdigest()
    item = {"pk": {"S": f"idem#{tenant}"}, "sk": {"S": f"trigger-slot#{digest}"}}
    expires = int(services.jobs.clock.now().timestamp()) + IDEMPOTENCY_TTL_S
    try:
        services.dynamodb.put_item(
            TableName=services.settings.table_name,
            Item={**item, "slot": {"S": slot}, "expires_at": {"N": str(expires)}},
            ConditionExpression="attribute_not_exists(pk)",
        )
        return slot
    except services.dynamodb.exceptions.ConditionalCheckFailedException:
        table = services.settings.table_name
        got = services.dynamodb.get_item(TableName=table, Key=item, ConsistentRead=True)
        first: str = got["Item"]["slot"]["S"]
        return first


def _decrypt(services: Services, stored: str | None) -> str | None:
    if not stored or services.reply_box is None:
        return None
    try:
        plain: str = services.reply_box.decrypt(stored)
        return plain
    except Exception as exc:  # no kms:Decrypt, or a rotated local key: the job still answers
        logger.warning("replayed create: signing secret not available: %s", exc)
        return None


def trigger_job(
    services: Services, tenant: str, job_id: str, key: str | None, lambda_context: Any | None = None
) -> str:
    """Run a job now; with a ``key``, a retry names the slot the first request queued."""
    if key is None:
        return services.jobs.trigger(tenant, job_id)

    def first_slot(slot: str) -> str:
        return _first_trigger_slot(services, tenant, job_id, key, slot)

    def run() -> dict[str, Any]:
        return {
            "slot": services.jobs.trigger(
                tenant, job_id, request_key=f"{tenant}\x1f{key}", first_slot=first_slot
            )
        }

    reply = _once(
        services,
        tenant,
        "trigger-job",
        "[tenant, job_id, key]",
        {"tenant": tenant, "job_id": job_id, "key": key, "body": {"job_id": job_id}},
        run,
        lambda_context,
    )
    slot: str = reply["slot"]
    return slot
