"""The DynamoDB JobStore: one table, ``pk``/``sk`` strings, TTL attribute ``expires_at``.

This module is the only code that builds DynamoDB keys and expressions.

Items::

    job          pk=job#<tenant>#<id>      sk=job            version, state, doc (JSON)
    listing      pk=tenant#<tenant>        sk=job#<id>       state, doc   (a tenant's jobs, one query)
    job count    pk=tenant#<tenant>        sk=#meta          job_count, trigger_rate (micro/min)
    API requests pk=reqs#<tenant>          sk=<window>       n, expires_at (per-tenant rate limit)
    execution    pk=job#<tenant>#<id>      sk=exec#<slot>    status, attempt, owner, doc, expires_at
    dependency   pk=job#<tenant>#<child>   sk=dep#<slot>     parents (string set), dispatched
    dependent    pk=job#<tenant>#<parent>  sk=child#<child>
    timer        pk=timer|near#<minute>#<shard>  sk=<due ms>#<job>#<slot>#<attempt>
    timer pack   pk=timer|near#<minute>#<shard>  sk=<window ms>#~<digest>  tm (JSON), n
    watermark    pk=wm#<lane>#<chunk>      sk=wm             m: {shard: minute}

A job's history is one query on its partition (``exec#`` prefix, newest first).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError
from pydantic import ValidationError

from punctual.models import Execution, ExecutionStatus, Job, JobState
from punctual.store.base import (
    ExecutionConflictError,
    ExecutionKey,
    Expect,
    JobExistsError,
    JobKey,
    JobStore,
    LayoutMismatchError,
    Page,
    ProgressMark,
    TenantLimitError,
    TriggerRateLimitError,
    Turn,
    UnreadableJob,
    UnreadableJobError,
    VersionConflictError,
)
from punctual.store.memory import tag_matches
from punctual.timers import (
    TTL_AFTER_DUE_S,
    Lane,
    Timer,
    TimerKind,
    TimerLayout,
    bucket_pk,
    due_bound,
    minute_key,
    parse_minute_key,
    slot_instant,
    slot_key,
)

WATERMARK_CHUNK = 64  # shards per watermark item: one write per chunk per poller per minute
logger = logging.getLogger(__name__)
_BATCH_GET_MAX = 100
_BATCH_WRITE_MAX = 25
_MAX_UNPROCESSED_ROUNDS = 12
# Timer packs: at most this many timers per item (~4 KB), all due within one window of the
# lane. A far bucket is read whole, so a pack may span its minute; a near bucket is read by
# due range, and a range read looks one window further back.
_PACK_MAX = 64
_PACK_SPAN_MS = {Lane.FAR: 60_000, Lane.NEAR: 1_000}
_KIND_CODE = {
    TimerKind.FIRE: "f",
    TimerKind.RETRY: "r",
    TimerKind.LEASE: "l",
    TimerKind.CHILD: "c",
    TimerKind.CATCHUP: "k",
    TimerKind.QUEUED: "q",
}
_KIND_OF_CODE = {code: kind for kind, code in _KIND_CODE.items()}


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _n(value: int | float) -> dict[str, str]:
    return {"N": str(value)}


def _slot_of_second(second: int) -> str:
    return slot_key(datetime.fromtimestamp(second, tz=UTC))


def _doc_of(item: dict[str, Any]) -> dict[str, Any]:
    try:
        doc = json.loads(item.get("doc", {}).get("S", ""))
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _first_errors(exc: Exception) -> str:
    """A short reason: the first three problems pydantic found, one line."""
    if isinstance(exc, ValidationError):
        parts = [
            f"{'.'.join(str(p) for p in error['loc']) or 'job'}: {error['msg']}" for error in exc.errors()[:3]
        ]
        more = exc.error_count() - len(parts)
        return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
    return " ".join(str(exc).split())[:300]


def _unreadable(
    item: dict[str, Any],
    doc: dict[str, Any] | None,
    reason: str,
    tenant: str | None = None,
    job_id: str | None = None,
) -> UnreadableJob:
    doc = doc if doc is not None else {}
    version = item.get("version", {}).get("N") or doc.get("version") or 0
    found = UnreadableJob(
        tenant=str(tenant or doc.get("tenant") or item["pk"]["S"].split("#", 2)[1]),
        id=str(job_id or doc.get("id") or ""),
        version=int(version) if str(version).isdigit() else 0,
        state=str(item.get("state", {}).get("S") or doc.get("state") or "ENABLED"),
        reason=reason[:1000],
        doc=doc,
        signing_secret_enc=item.get("secret", {}).get("S"),
        signing_secret_prev_enc=item.get("secret_prev", {}).get("S"),
        trigger_rate=int(item.get("tpm", {}).get("N") or 0),
    )
    logger.warning(
        "stored job %s of tenant %s cannot be read by this version's model (shown as unreadable): %s",
        found.id,
        found.tenant,
        found.reason,
    )
    return found


def _raw_tag_matches(doc: dict[str, Any], tag: str | None) -> bool:
    if tag is None:
        return True
    tags = doc.get("tags")
    if not isinstance(tags, dict):
        return False
    key, sep, value = tag.partition("=")
    return key in tags and (not sep or str(tags[key]) == value)


def job_pk(tenant: str, job_id: str) -> str:
    return f"job#{tenant}#{job_id}"


def tenant_pk(tenant: str) -> str:
    return f"tenant#{tenant}"


def _backoff(round_no: int) -> None:
    # Full jitter, capped: unprocessed items mean the table is throttling us.
    time.sleep(random.uniform(0, min(2.0, 0.02 * (2**round_no))))


class DynamoStore(JobStore):
    """JobStore over one DynamoDB table.

    Parameters
    ----------
    client
        A boto3 DynamoDB client (low level: attribute values are built here).
    table_name
        The table, with string keys ``pk`` and ``sk``.
    """

    def __init__(self, client: Any, table_name: str, layout: TimerLayout | None = None) -> None:
        self.client = client
        self.table = table_name
        self.layout = layout
        self._layout_checked = layout is None

    # ---------------------------------------------------------------- layout

    def check_layout(self) -> None:
        """Refuse to touch timers with shard counts other than the table's (once per process).

        The first process to write or read timers records its counts in the table (a
        conditional put, so two first processes agree); every later one compares. Only
        processes built with a ``layout`` check; tests and tools that pass none do not.
        """
        if self._layout_checked or self.layout is None:
            return
        key = {"pk": _s("meta#layout"), "sk": _s("layout")}
        want = {"far": self.layout.shard_count, "near": self.layout.near_shard_count}
        item = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")
        if item is None:
            try:
                self.client.put_item(
                    TableName=self.table,
                    Item={**key, "far": _n(want["far"]), "near": _n(want["near"])},
                    ConditionExpression="attribute_not_exists(pk)",
                )
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                item = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")
        if item is not None:
            have = {"far": int(item["far"]["N"]), "near": int(item["near"]["N"])}
            if have != want:
                raise LayoutMismatchError(
                    f"table {self.table!r} holds timers laid out for {have['far']} far / {have['near']} near"
                    f" shards, but this process is configured for {want['far']} / {want['near']}"
                    " (PUNCTUAL_SHARD_COUNT / PUNCTUAL_NEAR_SHARD_COUNT; cdk.json shardCount /"
                    " nearShardCount): shard counts are fixed when a table is first used; deploy with"
                    f" shardCount={have['far']} and nearShardCount={have['near']}"
                )
        self._layout_checked = True

    # ---------------------------------------------------------------- jobs

    @staticmethod
    def _job_doc(job: Job) -> str:
        return job.model_dump_json(exclude={"signing_secret_enc", "signing_secret_prev_enc"})

    def _job_attrs(self, job: Job) -> dict[str, Any]:
        attrs = {
            "version": _n(job.version),
            "state": _s(job.state.value),
            "doc": _s(self._job_doc(job)),
        }
        if job.trigger_rate:
            attrs["tpm"] = _n(job.trigger_rate)
        if job.signing_secret_enc:
            attrs["secret"] = _s(job.signing_secret_enc)
        if job.signing_secret_prev_enc:
            attrs["secret_prev"] = _s(job.signing_secret_prev_enc)
        return attrs

    def _job_from_item(self, item: dict[str, Any]) -> Job:
        try:
            data = json.loads(item["doc"]["S"])
        except ValueError as exc:
            raise UnreadableJobError(_unreadable(item, None, f"stored document is not JSON: {exc}")) from None
        if not isinstance(data, dict):
            raise UnreadableJobError(_unreadable(item, None, "stored document is not a JSON object"))
        data["version"] = int(item["version"]["N"])
        data["state"] = item["state"]["S"]
        if "skipped" in item:
            data["skipped_slots"] = int(item["skipped"]["N"])
        if "dependents" in item:
            data["dependents"] = int(item["dependents"]["N"])
        if "tpm" in item:
            data["trigger_rate"] = int(item["tpm"]["N"])
        if "secret" in item:
            data["signing_secret_enc"] = item["secret"]["S"]
        if "secret_prev" in item:
            data["signing_secret_prev_enc"] = item["secret_prev"]["S"]
        try:
            return Job.model_validate(data)
        except ValidationError as exc:
            raise UnreadableJobError(_unreadable(item, data, _first_errors(exc))) from None

    def _meta_update(
        self, tenant: str, jobs: int, max_jobs: int | None, rate: int, max_rate: int | None
    ) -> dict[str, Any]:
        """The tenant counter's update: ``jobs`` more jobs and ``rate`` more micro-triggers a minute."""
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": {"pk": _s(tenant_pk(tenant)), "sk": _s("#meta")},
            "UpdateExpression": "ADD #tr :rate" + (", job_count :jobs" if jobs else ""),
            "ExpressionAttributeNames": {"#tr": "trigger_rate"},
            "ExpressionAttributeValues": {":rate": _n(rate)},
        }
        conditions: list[str] = []
        if jobs:
            update["ExpressionAttributeValues"][":jobs"] = _n(jobs)
        if jobs > 0 and max_jobs is not None:
            conditions.append("(attribute_not_exists(job_count) OR job_count < :max)")
            update["ExpressionAttributeValues"][":max"] = _n(max_jobs)
        if rate > 0 and max_rate is not None:
            # The total after adding may not pass the quota: total <= max - rate.
            conditions.append("(attribute_not_exists(#tr) OR #tr <= :room)")
            update["ExpressionAttributeValues"][":room"] = _n(max_rate - rate)
        if conditions:
            update["ConditionExpression"] = " AND ".join(conditions)
            update["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"  # which quota it hit
        return update

    @staticmethod
    def _quota_error(
        old: dict[str, Any], max_jobs: int | None, rate: int, max_rate: int | None
    ) -> TenantLimitError:
        """Which quota a failed counter update hit, from the counter item as it was."""
        count = int(old["job_count"]["N"]) if "job_count" in old else 0
        if max_jobs is not None and count >= max_jobs:
            return TenantLimitError(f"tenant already has {max_jobs} jobs, the most it may have", max_jobs)
        current = int(old["trigger_rate"]["N"]) if "trigger_rate" in old else 0
        return TriggerRateLimitError(max_rate or 0, current, rate)

    def create_job(
        self, job: Job, timer: Timer | None, max_jobs: int, max_trigger_rate: int | None = None
    ) -> None:
        if max_trigger_rate is not None and job.trigger_rate > max_trigger_rate:
            raise TriggerRateLimitError(max_trigger_rate, None, job.trigger_rate)
        if timer is not None:
            self.check_layout()
        attrs = self._job_attrs(job)
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": {"pk": _s(job_pk(job.tenant, job.id)), "sk": _s("job"), **attrs},
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {
                "Put": {
                    "TableName": self.table,
                    "Item": {
                        "pk": _s(tenant_pk(job.tenant)),
                        "sk": _s(f"job#{job.id}"),
                        "state": attrs["state"],
                        "doc": attrs["doc"],
                    },
                }
            },
            {"Update": self._meta_update(job.tenant, 1, max_jobs, job.trigger_rate, max_trigger_rate)},
        ]
        if timer is not None:
            items.append({"Put": {"TableName": self.table, "Item": self._timer_item(timer)}})
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            if reasons and reasons[0] == "ConditionalCheckFailed":
                raise JobExistsError(f"job {job.id!r} already exists") from None
            if len(reasons) > 2 and reasons[2] == "ConditionalCheckFailed":
                old = exc.response["CancellationReasons"][2].get("Item") or {}
                raise self._quota_error(old, max_jobs, job.trigger_rate, max_trigger_rate) from None
            raise

    def get_job(self, tenant: str, job_id: str, consistent: bool = True) -> Job | None:
        reply = self.client.get_item(
            TableName=self.table,
            Key={"pk": _s(job_pk(tenant, job_id)), "sk": _s("job")},
            ConsistentRead=consistent,
        )
        item = reply.get("Item")
        return self._job_from_item(item) if item else None

    def _batch_get(self, keys: list[dict[str, Any]], consistent: bool = True) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for start in range(0, len(keys), _BATCH_GET_MAX):
            request: dict[str, Any] = {
                self.table: {"Keys": keys[start : start + _BATCH_GET_MAX], "ConsistentRead": consistent}
            }
            for round_no in range(_MAX_UNPROCESSED_ROUNDS):
                reply = self.client.batch_get_item(RequestItems=request)
                found.extend(reply.get("Responses", {}).get(self.table, []))
                request = reply.get("UnprocessedKeys") or {}
                if not request:
                    break
                _backoff(round_no)
            else:
                raise RuntimeError("BatchGetItem left keys unprocessed after repeated retries")
        return found

    def batch_get_jobs(self, keys: Iterable[JobKey], consistent: bool = True) -> dict[JobKey, Job]:
        unique = sorted(set(keys))
        items = self._batch_get([{"pk": _s(job_pk(t, j)), "sk": _s("job")} for t, j in unique], consistent)
        jobs = (self._job_from_item(item) for item in items)
        return {(job.tenant, job.id): job for job in jobs}

    def list_jobs(
        self,
        tenant: str,
        limit: int,
        cursor: str | None = None,
        state: JobState | None = None,
        tag: str | None = None,
    ) -> Page[Job]:
        items: list[Job] = []
        unreadable: list[UnreadableJob] = []
        start_key: dict[str, Any] | None = (
            {"pk": _s(tenant_pk(tenant)), "sk": _s(f"job#{cursor}")} if cursor else None
        )
        while True:
            request: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "pk = :pk AND begins_with(sk, :job)",
                "ExpressionAttributeValues": {":pk": _s(tenant_pk(tenant)), ":job": _s("job#")},
                "Limit": max(limit - len(items) - len(unreadable), 1)
                if state is None and tag is None
                else 100,
                "ConsistentRead": True,
            }
            if start_key:
                request["ExclusiveStartKey"] = start_key
            reply = self.client.query(**request)
            for item in reply.get("Items", []):
                job_id = item["sk"]["S"].removeprefix("job#")
                try:
                    job = Job.model_validate_json(item["doc"]["S"])
                except ValueError as exc:
                    # One item an older, laxer model wrote must not fail the tenant's whole list.
                    found = _unreadable(item, _doc_of(item), _first_errors(exc), tenant, job_id)
                    if (state is None or found.state == state.value) and _raw_tag_matches(found.doc, tag):
                        unreadable.append(found)
                else:
                    if (state is None or job.state == state) and tag_matches(job, tag):
                        items.append(job)
                if len(items) + len(unreadable) == limit:
                    return Page(items, job_id, unreadable)
            start_key = reply.get("LastEvaluatedKey")
            if not start_key:
                return Page(items, None, unreadable)

    def replace_job(
        self,
        job: Job,
        expected_version: int,
        timers: Sequence[Timer] = (),
        *,
        previous_trigger_rate: int | None = None,
        max_trigger_rate: int | None = None,
    ) -> None:
        delta = 0 if previous_trigger_rate is None else job.trigger_rate - previous_trigger_rate
        if delta > 0 and max_trigger_rate is not None and delta > max_trigger_rate:
            raise TriggerRateLimitError(max_trigger_rate, None, delta)
        if timers:
            self.check_layout()
        attrs = self._job_attrs(job)
        names = {"#v": "version", "#st": "state", "#d": "doc"}
        values = {
            ":v": attrs["version"],
            ":st": attrs["state"],
            ":d": attrs["doc"],
            ":exp": _n(expected_version),
        }
        update = "SET #v = :v, #st = :st, #d = :d"
        if "tpm" in attrs:
            update += ", tpm = :tpm"
            values[":tpm"] = attrs["tpm"]
        if "secret" in attrs:
            update += ", secret = :sec"
            values[":sec"] = attrs["secret"]
        if "secret_prev" in attrs:
            update += ", secret_prev = :prev"
            values[":prev"] = attrs["secret_prev"]
        else:
            update += " REMOVE secret_prev"
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": {"pk": _s(job_pk(job.tenant, job.id)), "sk": _s("job")},
                    "UpdateExpression": update,
                    "ConditionExpression": "#v = :exp",
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            {
                "Put": {
                    "TableName": self.table,
                    "Item": {
                        "pk": _s(tenant_pk(job.tenant)),
                        "sk": _s(f"job#{job.id}"),
                        "state": attrs["state"],
                        "doc": attrs["doc"],
                    },
                }
            },
        ]
        if delta:
            items.append({"Update": self._meta_update(job.tenant, 0, None, delta, max_trigger_rate)})
        items.extend({"Put": {"TableName": self.table, "Item": self._timer_item(t)}} for t in timers)
        try:
            self._versioned_transaction(items, job.id, expected_version)
        except ClientError as exc:
            reasons = exc.response.get("CancellationReasons", [])
            if delta and len(reasons) > 2 and reasons[2].get("Code") == "ConditionalCheckFailed":
                raise self._quota_error(reasons[2].get("Item") or {}, None, delta, max_trigger_rate) from None
            raise

    def delete_job(
        self, tenant: str, job_id: str, expected_version: int | None = None, trigger_rate: int = 0
    ) -> None:
        condition = "attribute_exists(pk)"
        values: dict[str, Any] = {}
        if expected_version is not None:
            condition += " AND version = :exp"
            values[":exp"] = _n(expected_version)
        delete: dict[str, Any] = {
            "TableName": self.table,
            "Key": {"pk": _s(job_pk(tenant, job_id)), "sk": _s("job")},
            "ConditionExpression": condition,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if values:
            delete["ExpressionAttributeValues"] = values
        items = [
            {"Delete": delete},
            {
                "Delete": {
                    "TableName": self.table,
                    "Key": {"pk": _s(tenant_pk(tenant)), "sk": _s(f"job#{job_id}")},
                }
            },
            {"Update": self._meta_update(tenant, -1, None, -trigger_rate, None)},
        ]
        self._versioned_transaction(items, job_id, expected_version)

    def tenant_trigger_rate(self, tenant: str) -> int:
        item = self.client.get_item(
            TableName=self.table,
            Key={"pk": _s(tenant_pk(tenant)), "sk": _s("#meta")},
            ConsistentRead=True,
        ).get("Item")
        return int(item["trigger_rate"]["N"]) if item and "trigger_rate" in item else 0

    def count_request(self, tenant: str, window: str, limit: int, ttl_epoch_s: int) -> bool:
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"pk": _s(f"reqs#{tenant}"), "sk": _s(window)},
                UpdateExpression="ADD n :one SET expires_at = if_not_exists(expires_at, :ttl)",
                ConditionExpression="attribute_not_exists(n) OR n < :limit",
                ExpressionAttributeValues={":one": _n(1), ":limit": _n(limit), ":ttl": _n(ttl_epoch_s)},
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def _versioned_transaction(
        self, items: list[dict[str, Any]], job_id: str, expected_version: int | None
    ) -> None:
        """Run a transaction whose first item is conditional on the job's version."""
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            reasons = exc.response.get("CancellationReasons", [])
            if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                old = reasons[0].get("Item") or {}
                current = int(old["version"]["N"]) if "version" in old else None
                raise VersionConflictError(
                    f"job {job_id!r} is not at version {expected_version}", current
                ) from None
            raise

    def add_skipped(self, tenant: str, job_id: str, count: int) -> None:
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"pk": _s(job_pk(tenant, job_id)), "sk": _s("job")},
                UpdateExpression="ADD skipped :n",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues={":n": _n(count)},
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    # ---------------------------------------------------------------- timers
    #
    # A timer is one row when it is written alone (registration, a retry, a lease). The
    # poller writes the next timers of a whole release at once: those that share a bucket
    # and a due window are packed into one item (``tm``: a compact JSON list), because a
    # write costs one unit per started kilobyte and a row is ~180 bytes, a packed entry
    # ~65. A pack's sort key is its window's first instant plus a digest of its entries,
    # so rewriting the same set writes the same item, and a reader that finds one timer in
    # two items (two pollers packed it differently) returns it once.

    @staticmethod
    def _timer_item(timer: Timer) -> dict[str, Any]:
        item = {
            "pk": _s(timer.pk),
            "sk": _s(timer.sk),
            "tenant": _s(timer.tenant),
            "job_id": _s(timer.job_id),
            "slot": _s(timer.slot),
            "attempt": _n(timer.attempt),
            "kind": _s(timer.kind.value),
            "job_version": _n(timer.job_version),
            "due_ms": _n(timer.due_ms),
            "expires_at": _n(timer.expires_at),
        }
        if timer.owner:
            item["owner"] = _s(timer.owner)
        return item

    @staticmethod
    def _timer_from_item(item: dict[str, Any]) -> Timer:
        lane_name, _, shard = item["pk"]["S"].split("#")
        return Timer(
            lane=Lane(lane_name),
            shard=int(shard),
            due_ms=int(item["due_ms"]["N"]),
            job_id=item["job_id"]["S"],
            tenant=item["tenant"]["S"],
            slot=item["slot"]["S"],
            attempt=int(item["attempt"]["N"]),
            kind=TimerKind(item["kind"]["S"]),
            job_version=int(item["job_version"]["N"]),
            owner=item["owner"]["S"] if "owner" in item else None,
        )

    @staticmethod
    def _pack_item(pk: str, window_ms: int, timers: Sequence[Timer]) -> dict[str, Any]:
        """One item holding several timers of one bucket, all due within one window."""
        tenants: dict[str, int] = {}
        entries: list[list[Any]] = []
        for t in sorted(timers, key=lambda t: t.sk):
            slot: str | int = t.slot
            if "~" not in t.slot:
                second = int(slot_instant(t.slot).timestamp())
                if _slot_of_second(second) == t.slot:
                    slot = second  # a plain slot key: its epoch second (10 bytes, not 22)
            entry: list[Any] = [t.due_ms, t.job_id, tenants.setdefault(t.tenant, len(tenants)), slot]
            entry += [t.attempt, _KIND_CODE[t.kind], t.job_version]
            if t.owner:
                entry.append(t.owner)
            entries.append(entry)
        body = json.dumps([list(tenants), entries], separators=(",", ":"))
        digest = hashlib.blake2b(body.encode(), digest_size=8).hexdigest()
        return {
            "pk": _s(pk),
            "sk": _s(f"{due_bound(window_ms)}#~{digest}"),
            "tm": _s(body),
            "n": _n(len(entries)),
            "expires_at": _n(max(t.expires_at for t in timers)),
        }

    @staticmethod
    def _timers_from_pack(item: dict[str, Any]) -> list[Timer]:
        lane_name, _, shard_text = item["pk"]["S"].split("#")
        lane, shard = Lane(lane_name), int(shard_text)
        tenants, entries = json.loads(item["tm"]["S"])
        out: list[Timer] = []
        for entry in entries:
            due, job_id, tenant, slot, attempt, kind, version = entry[:7]
            out.append(
                Timer(
                    lane=lane,
                    shard=shard,
                    due_ms=due,
                    job_id=job_id,
                    tenant=tenants[tenant],
                    slot=_slot_of_second(slot) if isinstance(slot, int) else slot,
                    attempt=attempt,
                    kind=_KIND_OF_CODE[kind],
                    job_version=version,
                    owner=entry[7] if len(entry) > 7 else None,
                )
            )
        return out

    @staticmethod
    def _pack_window(lane: Lane, due_ms: int) -> int:
        span = _PACK_SPAN_MS[lane]
        return due_ms - due_ms % span

    def _timer_rows(self, timers: Sequence[Timer]) -> list[dict[str, Any]]:
        """The items to write for ``timers``: a row for a lone timer, packs for the rest."""
        groups: dict[tuple[str, int], dict[str, Timer]] = {}
        for t in timers:
            groups.setdefault((t.pk, self._pack_window(t.lane, t.due_ms)), {})[t.sk] = t
        rows: list[dict[str, Any]] = []
        for (pk, window), members in groups.items():
            ordered = [members[sk] for sk in sorted(members)]
            for start in range(0, len(ordered), _PACK_MAX):
                part = ordered[start : start + _PACK_MAX]
                single = len(part) == 1
                rows.append(self._timer_item(part[0]) if single else self._pack_item(pk, window, part))
        return rows

    def put_timers(self, timers: Sequence[Timer]) -> None:
        self.check_layout()
        # BatchWriteItem cannot be conditional, and need not be: a timer is immutable and an
        # item's key follows from its content, so rewriting it writes the same bytes.
        rows = [{"PutRequest": {"Item": item}} for item in self._timer_rows(timers)]
        for start in range(0, len(rows), _BATCH_WRITE_MAX):
            request: dict[str, Any] = {self.table: rows[start : start + _BATCH_WRITE_MAX]}
            for round_no in range(_MAX_UNPROCESSED_ROUNDS):
                reply = self.client.batch_write_item(RequestItems=request)
                request = reply.get("UnprocessedItems") or {}
                if not request:
                    break
                _backoff(round_no)
            else:
                raise RuntimeError("BatchWriteItem left timers unprocessed after repeated retries")

    def query_timers(
        self,
        lane: Lane,
        minute: datetime,
        shard: int,
        from_ms: int | None = None,
        to_ms: int | None = None,
    ) -> list[Timer]:
        """The timers of one bucket due in [from_ms, to_ms], in due order.

        A read bounded below is a poll of the near lane, which the poller repeats over a
        look-back window: it is eventually consistent (half the read cost; a row not yet
        visible is found by a later poll, and the poller's last read is a full, strongly
        consistent one). Every other read is strongly consistent.
        """
        self.check_layout()
        values: dict[str, Any] = {":pk": _s(bucket_pk(lane, minute, shard))}
        condition = "pk = :pk"
        # A pack's sort key is its window's start: look one window further back.
        low = None if from_ms is None else max(0, from_ms - _PACK_SPAN_MS[lane] + 1)
        if low is not None and to_ms is not None:
            condition += " AND sk BETWEEN :lo AND :hi"
            values[":lo"] = _s(due_bound(low))
            values[":hi"] = _s(due_bound(to_ms) + "$")  # '$' sorts after '#': includes due == to_ms
        elif low is not None:
            condition += " AND sk >= :lo"
            values[":lo"] = _s(due_bound(low))
        elif to_ms is not None:
            condition += " AND sk <= :hi"
            values[":hi"] = _s(due_bound(to_ms) + "$")
        found: dict[str, Timer] = {}
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": from_ms is None,
        }
        lo, hi = from_ms if from_ms is not None else -1, to_ms if to_ms is not None else 1 << 62
        while True:
            reply = self.client.query(**request)
            for item in reply.get("Items", []):
                batch = self._timers_from_pack(item) if "tm" in item else [self._timer_from_item(item)]
                for timer in batch:
                    if lo <= timer.due_ms <= hi:
                        found.setdefault(timer.sk, timer)
            last = reply.get("LastEvaluatedKey")
            if not last:
                return [found[sk] for sk in sorted(found)]
            request["ExclusiveStartKey"] = last

    def count_timers(self, lane: Lane, minute: datetime, shard: int) -> int:
        self.check_layout()
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": _s(bucket_pk(lane, minute, shard))},
            "ProjectionExpression": "n",
        }
        total = 0
        while True:
            reply = self.client.query(**request)
            total += sum(int(item["n"]["N"]) if "n" in item else 1 for item in reply.get("Items", []))
            last = reply.get("LastEvaluatedKey")
            if not last:
                return total
            request["ExclusiveStartKey"] = last

    @staticmethod
    def _chunks(shards: Sequence[int]) -> dict[int, list[int]]:
        chunks: dict[int, list[int]] = {}
        for shard in shards:
            chunks.setdefault(shard // WATERMARK_CHUNK, []).append(shard)
        return chunks

    def get_watermarks(self, lane: Lane, shards: Sequence[int]) -> dict[int, datetime]:
        chunks = self._chunks(shards)
        keys = [{"pk": _s(f"wm#{lane.value}#{chunk}"), "sk": _s("wm")} for chunk in chunks]
        wanted = set(shards)
        marks: dict[int, datetime] = {}
        for item in self._batch_get(keys):
            for shard_text, value in item.get("m", {}).get("M", {}).items():
                if int(shard_text) in wanted:
                    marks[int(shard_text)] = parse_minute_key(value["S"])
        return marks

    def advance_watermarks(self, lane: Lane, shards: Sequence[int], minute: datetime) -> None:
        target = minute_key(minute)
        for chunk, members in self._chunks(shards).items():
            self._advance_chunk(f"wm#{lane.value}#{chunk}", members, target)

    def _advance_chunk(self, pk: str, shards: list[int], target: str) -> None:
        key = {"pk": _s(pk), "sk": _s("wm")}
        pending = list(shards)
        for _ in range(_MAX_UNPROCESSED_ROUNDS):
            if not pending:
                return
            names = {f"#s{i}": str(shard) for i, shard in enumerate(pending)}
            sets = ", ".join(f"m.#s{i} = :m" for i in range(len(pending)))
            checks = " AND ".join(
                f"(attribute_not_exists(m.#s{i}) OR m.#s{i} < :m)" for i in range(len(pending))
            )
            try:
                self.client.update_item(
                    TableName=self.table,
                    Key=key,
                    UpdateExpression=f"SET {sets}",
                    ConditionExpression=checks,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues={":m": _s(target)},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                return
            except ClientError as exc:
                code = exc.response["Error"]["Code"]
                if code == "ValidationException":
                    # The map does not exist yet: create the item, then try again.
                    self._create_watermark_item(key)
                    continue
                if code != "ConditionalCheckFailedException":
                    raise
                old = exc.response.get("Item", {}).get("m", {}).get("M", {})
                # Never move a shard backward: keep only those still behind the target.
                pending = [s for s in pending if str(s) not in old or old[str(s)]["S"] < target]
        raise RuntimeError(f"could not advance watermark {pk}")

    def _create_watermark_item(self, key: dict[str, Any]) -> None:
        try:
            self.client.put_item(
                TableName=self.table,
                Item={**key, "m": {"M": {}}},
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    # Progress marks: one small item per (minute, shard group), ``progress#<minute>`` /
    # ``<group>/<group_count>``, holding ``through_ms``; a conditional update never moves it
    # back. A poller reads its minute's marks once when it starts (one Query).

    def put_progress(self, minute: datetime, group: int, group_count: int, through_ms: int) -> None:
        expires = int(minute.timestamp()) + TTL_AFTER_DUE_S
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"pk": _s(f"progress#{minute_key(minute)}"), "sk": _s(f"{group}/{group_count}")},
                UpdateExpression="SET through_ms = :t, expires_at = :e",
                ConditionExpression="attribute_not_exists(through_ms) OR through_ms < :t",
                ExpressionAttributeValues={":t": _n(through_ms), ":e": _n(expires)},
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise  # a mark already further on is not an error: it stays

    def get_progress(self, minute: datetime) -> list[ProgressMark]:
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": _s(f"progress#{minute_key(minute)}")},
            "ConsistentRead": True,
        }
        marks: list[ProgressMark] = []
        while True:
            reply = self.client.query(**request)
            for item in reply.get("Items", []):
                group, _, count = item["sk"]["S"].partition("/")
                marks.append(ProgressMark(int(group), int(count), int(item["through_ms"]["N"])))
            last = reply.get("LastEvaluatedKey")
            if not last:
                return marks
            request["ExclusiveStartKey"] = last

    # Turns: one item per skip/queue job, ``job#<tenant>#<job>`` / ``turn``: ``holder`` (a slot),
    # ``since`` (ISO instant), ``waiting`` (a string set of slots). Conditional updates only.

    @staticmethod
    def _turn_of(item: dict[str, Any] | None) -> Turn:
        if not item:
            return Turn()
        since = item.get("since", {}).get("S")
        return Turn(
            holder=item.get("holder", {}).get("S"),
            since=datetime.fromisoformat(since) if since else None,
            waiting=tuple(sorted(item.get("waiting", {}).get("SS", []))),
        )

    def _turn_key(self, tenant: str, job_id: str) -> dict[str, Any]:
        return {"pk": _s(job_pk(tenant, job_id)), "sk": _s("turn")}

    def take_turn(
        self, tenant: str, job_id: str, slot: str, now: datetime, replacing: str | None = None
    ) -> Turn:
        condition = "attribute_not_exists(holder) OR holder = :s"
        values: dict[str, Any] = {":s": _s(slot), ":ss": {"SS": [slot]}, ":now": _s(now.isoformat())}
        # ``since`` is when the holder took the turn: kept when it takes it again; restarted
        # when it takes the turn over from a stale holder.
        since = "if_not_exists(since, :now)"
        if replacing is not None:
            condition += " OR holder = :r"
            values[":r"] = _s(replacing)
            since = ":now"
        try:
            reply = self.client.update_item(
                TableName=self.table,
                Key=self._turn_key(tenant, job_id),
                UpdateExpression=f"SET since = {since}, holder = :s DELETE waiting :ss",
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return self._turn_of(exc.response.get("Item"))
        return self._turn_of(reply.get("Attributes"))

    def wait_for_turn(self, tenant: str, job_id: str, slot: str) -> None:
        self.client.update_item(
            TableName=self.table,
            Key=self._turn_key(tenant, job_id),
            UpdateExpression="ADD waiting :ss",
            ExpressionAttributeValues={":ss": {"SS": [slot]}},
        )

    def pass_turn(self, tenant: str, job_id: str, slot: str, now: datetime) -> str | None:
        key = self._turn_key(tenant, job_id)
        for _ in range(_MAX_UNPROCESSED_ROUNDS):
            item = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")
            turn = self._turn_of(item)
            if turn.holder != slot:
                return None
            try:
                if turn.waiting:
                    following = turn.waiting[0]
                    self.client.update_item(
                        TableName=self.table,
                        Key=key,
                        UpdateExpression="SET holder = :n, since = :now DELETE waiting :ns",
                        ConditionExpression="holder = :s AND contains(waiting, :n)",
                        ExpressionAttributeValues={
                            ":s": _s(slot),
                            ":n": _s(following),
                            ":ns": {"SS": [following]},
                            ":now": _s(now.isoformat()),
                        },
                    )
                    return following
                self.client.update_item(
                    TableName=self.table,
                    Key=key,
                    UpdateExpression="REMOVE holder, since",
                    # A slot that started waiting meanwhile gets the turn on the next round.
                    ConditionExpression="holder = :s AND attribute_not_exists(waiting)",
                    ExpressionAttributeValues={":s": _s(slot)},
                )
                return None
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
        raise RuntimeError(f"could not pass the turn of job {job_id}")

    # ---------------------------------------------------------------- executions

    @staticmethod
    def _execution_from_item(item: dict[str, Any]) -> Execution:
        return Execution.model_validate_json(item["doc"]["S"])

    def save_execution(self, execution: Execution, expect: Expect | None, ttl_epoch_s: int) -> None:
        item = {
            "pk": _s(job_pk(execution.tenant, execution.job_id)),
            "sk": _s(f"exec#{execution.slot}"),
            "status": _s(execution.status.value),
            "attempt": _n(execution.attempt),
            "doc": _s(execution.model_dump_json()),
            "expires_at": _n(ttl_epoch_s),
        }
        if execution.owner:
            item["owner"] = _s(execution.owner)
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        if expect is None:
            condition = "attribute_not_exists(pk)"
        else:
            parts = ["attribute_exists(pk)"]
            if expect.statuses:
                names["#st"] = "status"
                keys = []
                for i, status in enumerate(sorted(expect.statuses)):
                    values[f":st{i}"] = _s(status.value)
                    keys.append(f":st{i}")
                parts.append(f"#st IN ({', '.join(keys)})")
            if expect.attempt is not None:
                parts.append("attempt = :att")
                values[":att"] = _n(expect.attempt)
            if expect.owner is not None:
                names["#ow"] = "owner"
                parts.append("#ow = :ow")
                values[":ow"] = _s(expect.owner)
            elif expect.check_owner:
                names["#ow"] = "owner"
                parts.append("attribute_not_exists(#ow)")
            condition = " AND ".join(parts)
        request: dict[str, Any] = {
            "TableName": self.table,
            "Item": item,
            "ConditionExpression": condition,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if names:
            request["ExpressionAttributeNames"] = names
        if values:
            request["ExpressionAttributeValues"] = values
        try:
            self.client.put_item(**request)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            old = exc.response.get("Item")
            current = self._execution_from_item(old) if old and "doc" in old else None
            message = (
                "execution already exists" if expect is None else "execution is not in the expected state"
            )
            raise ExecutionConflictError(message, current) from None

    def get_execution(self, tenant: str, job_id: str, slot: str) -> Execution | None:
        reply = self.client.get_item(
            TableName=self.table,
            Key={"pk": _s(job_pk(tenant, job_id)), "sk": _s(f"exec#{slot}")},
            ConsistentRead=True,
        )
        item = reply.get("Item")
        return self._execution_from_item(item) if item else None

    def batch_get_executions(self, keys: Iterable[ExecutionKey]) -> dict[ExecutionKey, Execution]:
        unique = sorted(set(keys))
        items = self._batch_get([{"pk": _s(job_pk(t, j)), "sk": _s(f"exec#{s}")} for t, j, s in unique])
        found = (self._execution_from_item(item) for item in items)
        return {(e.tenant, e.job_id, e.slot): e for e in found}

    def list_executions(
        self,
        tenant: str,
        job_id: str,
        limit: int,
        cursor: str | None = None,
        status: ExecutionStatus | None = None,
        newest_first: bool = True,
    ) -> Page[Execution]:
        items: list[Execution] = []
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :ex)",
            "ExpressionAttributeValues": {":pk": _s(job_pk(tenant, job_id)), ":ex": _s("exec#")},
            "ScanIndexForward": not newest_first,
            "ConsistentRead": True,
        }
        if status is not None:
            request["FilterExpression"] = "#st = :st"
            request["ExpressionAttributeNames"] = {"#st": "status"}
            request["ExpressionAttributeValues"][":st"] = _s(status.value)
        if cursor:
            request["ExclusiveStartKey"] = {"pk": _s(job_pk(tenant, job_id)), "sk": _s(f"exec#{cursor}")}
        while True:
            request["Limit"] = max(limit - len(items), 1) if status is None else 100
            reply = self.client.query(**request)
            for item in reply.get("Items", []):
                items.append(self._execution_from_item(item))
                if len(items) == limit:
                    return Page(items, items[-1].slot)
            last = reply.get("LastEvaluatedKey")
            if not last:
                return Page(items, None)
            request["ExclusiveStartKey"] = last

    # ---------------------------------------------------------------- dependencies

    def record_parent_success(
        self, tenant: str, child_id: str, slot: str, parent_id: str, ttl_epoch_s: int
    ) -> frozenset[str]:
        reply = self.client.update_item(
            TableName=self.table,
            Key={"pk": _s(job_pk(tenant, child_id)), "sk": _s(f"dep#{slot}")},
            UpdateExpression="ADD parents :p SET expires_at = :ttl",
            ExpressionAttributeValues={":p": {"SS": [parent_id]}, ":ttl": _n(ttl_epoch_s)},
            ReturnValues="ALL_NEW",
        )
        return frozenset(reply["Attributes"]["parents"]["SS"])

    def claim_child_dispatch(self, tenant: str, child_id: str, slot: str) -> bool:
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"pk": _s(job_pk(tenant, child_id)), "sk": _s(f"dep#{slot}")},
                UpdateExpression="SET dispatched = :t",
                ConditionExpression="attribute_not_exists(dispatched)",
                ExpressionAttributeValues={":t": {"BOOL": True}},
            )
            return True
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise

    def set_dependents(self, tenant: str, child_id: str, parents: Sequence[str], present: bool) -> None:
        for parent in parents:
            key = {"pk": _s(job_pk(tenant, parent)), "sk": _s(f"child#{child_id}")}
            # The link and the parent's count change together, and only if the link changes.
            link: dict[str, Any] = (
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": key,
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
                if present
                else {
                    "Delete": {
                        "TableName": self.table,
                        "Key": key,
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                }
            )
            count = {
                "Update": {
                    "TableName": self.table,
                    "Key": {"pk": _s(job_pk(tenant, parent)), "sk": _s("job")},
                    "UpdateExpression": "ADD dependents :d",
                    "ConditionExpression": "attribute_exists(pk)",
                    "ExpressionAttributeValues": {":d": _n(1 if present else -1)},
                }
            }
            try:
                self.client.transact_write_items(TransactItems=[link, count])
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "TransactionCanceledException":
                    raise
                # The link was already as wanted, or the parent is gone: nothing to count.
                reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
                if (
                    reasons
                    and reasons[0] != "ConditionalCheckFailed"
                    and reasons[1:2] != ["ConditionalCheckFailed"]
                ):
                    raise

    def list_dependents(self, tenant: str, parent_id: str) -> list[str]:
        children: list[str] = []
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :c)",
            "ExpressionAttributeValues": {":pk": _s(job_pk(tenant, parent_id)), ":c": _s("child#")},
        }
        while True:
            reply = self.client.query(**request)
            children.extend(item["sk"]["S"].removeprefix("child#") for item in reply.get("Items", []))
            last = reply.get("LastEvaluatedKey")
            if not last:
                return sorted(children)
            request["ExclusiveStartKey"] = last


def table_definition(table_name: str) -> dict[str, Any]:
    """The CreateTable request local mode and tests use (the CDK app declares the same keys)."""
    return {
        "TableName": table_name,
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        "BillingMode": "PAY_PER_REQUEST",
    }
