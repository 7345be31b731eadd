"""Jobs in DynamoDB: the job item, its tenant listing, the tenant counters (job count, trigger rate,
API requests) and the skipped counter."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from botocore.exceptions import ClientError
from pydantic import ValidationError
from pydantic_core import from_json

from punctual.models import ACCEPTED, Job, JobState
from punctual.models.base import read_stored, without_unknown_fields
from punctual.models.job_documents import KEPT_BESIDE, note_document
from punctual.models.jobs import read_accepted
from punctual.store.base import (
    NO_CALENDAR_USES,
    CalendarUses,
    GraphChangedError,
    GraphRead,
    JobExistsError,
    JobKey,
    JobRepository,
    Page,
    TenantLimitError,
    TriggerRateLimitError,
    UnreadableJob,
    UnreadableJobError,
    VersionConflictError,
)
from punctual.store.dynamo import dependency_schema, newer_fields, schema
from punctual.store.dynamo.calendar_uses import DynamoCalendarUses
from punctual.store.dynamo.keys import (
    _doc_of,
    _first_errors,
    _unreadable,
    tenant_pk,
)
from punctual.store.dynamo.sizes import check_job_size
from punctual.store.listing import LIST_SCAN_BUDGET, tag_matches, tags_match
from punctual.timing.timers import (
    Timer,
)

log = logging.getLogger("punctual.store")


class DynamoJobs(DynamoCalendarUses, JobRepository):
    """Jobs in DynamoDB: the job item, its tenant listing, the tenant counters (job count, trigger rate,"""

    # ---------------------------------------------------------------- jobs

    def _job_attrs(self, job: Job) -> dict[str, Any]:
        check_job_size(job)  # refused here, not by DynamoDB's ValidationException (a 500)
        attrs = schema.job_attributes(job)
        attrs.update(schema.audit_attrs(self.audit_segment_of(job.tenant, job.id)))
        return attrs

    def _job_from_item(self, item: dict[str, Any]) -> Job:
        document = item["doc"]["S"]
        job = _whole_job(item, document)
        if job is not None:
            return job
        try:
            # pydantic's parser: the same values as json.loads (the last of a repeated key, NaN
            # read as a float), in about two thirds of the time on the poller's hot path. It stops
            # at a depth json.loads reads past: such a document is read by json.loads, as before
            # (the model then names what is wrong with it).
            data = from_json(document)
        except ValueError:
            try:
                data = json.loads(document)
            except ValueError as exc:
                reason = f"stored document is not JSON: {exc}"
                raise UnreadableJobError(_unreadable(item, None, reason)) from None
        if not isinstance(data, dict):
            raise UnreadableJobError(_unreadable(item, None, "stored document is not a JSON object"))
        attributes: dict[str, Any] = {"version": int(item["version"]["N"]), "state": item["state"]["S"]}
        if "skipped" in item:
            attributes["skipped_slots"] = int(item["skipped"]["N"])
        # The document says all the job holds (but what the store keeps beside it) when the item's
        # attributes agree with it: then it stands for the job's dump (a message carries it).
        whole = (
            document.endswith("}")
            and KEPT_BESIDE.isdisjoint(data)
            and all(name in data and data[name] == value for name, value in attributes.items())
        )
        data.update(attributes)
        for attribute, field, value_of in _BESIDE:
            if attribute in item:
                data[field] = value_of(item[attribute])
        try:
            job = Job.model_validate(data, context=ACCEPTED)  # accepted when written
        except ValidationError as exc:
            job = _known_part(item, data, exc)  # a newer version's document (a rollback), else raised
            whole = False  # what the document holds is not all the job: never carried as it is
        if whole:
            note_document(job, document)
        return job

    def _meta_update(
        self, tenant: str, jobs: int, max_jobs: int | None, rate: int, max_rate: int | None
    ) -> dict[str, Any]:
        """The tenant counter's update: ``jobs`` more jobs and ``rate`` more micro-triggers a minute."""
        counters = schema.tenant_counters(jobs, max_jobs, rate, max_rate)
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": schema.tenant_meta_key(tenant),
            **counters.fields(),
        }
        if counters.condition:
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
        self,
        job: Job,
        timer: Timer | None,
        max_jobs: int,
        max_trigger_rate: int | None = None,
        parents: Sequence[str] = (),
        *,
        calendars: CalendarUses = NO_CALENDAR_USES,
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
                    "Item": {**schema.job_key(job.tenant, job.id), **attrs},
                    **schema.CREATE.fields(),
                }
            },
            {
                "Put": {
                    "TableName": self.table,
                    "Item": {
                        **schema.listing_key(job.tenant, job.id),
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
            links = {parent: self._add_link(job.tenant, parent, job.id) for parent in parents}
            self._transact_job_write(items, job.tenant, job.id, calendars, links)
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
            Key=schema.job_key(tenant, job_id),
            ConsistentRead=consistent,
        )
        item = reply.get("Item")
        return self._job_from_item(item) if item else None

    def batch_get_jobs(self, keys: Iterable[JobKey], consistent: bool = True) -> dict[JobKey, Job]:
        unique = sorted(set(keys))
        items = self._batch_get([schema.job_key(t, j) for t, j in unique], consistent)
        found: dict[JobKey, Job] = {}
        for item in items:
            try:
                job = self._job_from_item(item)
            except UnreadableJobError as exc:
                # One job this version cannot read must not fail the others' reads (a poller's whole
                # release chunk): left out, as a job that is not there, and said. Its chain's timer is
                # dropped as stale; once it reads again (a fix, or a PUT) the auditor restarts it.
                log.error("job %s cannot be read, left out of a batch read: %s", item["pk"]["S"], exc)
                continue
            found[(job.tenant, job.id)] = job
        return found

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
        start_key: dict[str, Any] | None = schema.listing_key(tenant, cursor) if cursor else None
        examined = 0
        while True:
            request: dict[str, Any] = {
                "TableName": self.table,
                **schema.partition(tenant_pk(tenant), schema.LISTING_PREFIX).fields(),
                "Limit": max(limit - len(items) - len(unreadable), 1)
                if state is None and tag is None
                else 100,
                "ConsistentRead": True,
            }
            if start_key:
                request["ExclusiveStartKey"] = start_key
            reply = self.client.query(**request)
            for item in reply.get("Items", []):
                job_id = item["sk"]["S"].removeprefix(schema.LISTING_PREFIX)
                try:
                    job = read_stored(Job, item["doc"]["S"], ACCEPTED)  # a newer version's too
                except ValueError as exc:
                    # One item an older, laxer model wrote must not fail the tenant's whole list.
                    found = _unreadable(item, _doc_of(item), _first_errors(exc), tenant, job_id)
                    in_state = state is None or found.state == state.value
                    if in_state and tags_match(found.doc.get("tags"), tag):
                        unreadable.append(found)
                else:
                    if (state is None or job.state == state) and tag_matches(job, tag):
                        items.append(job)
                examined += 1
                if len(items) + len(unreadable) == limit or examined >= LIST_SCAN_BUDGET:
                    return Page(items, job_id, unreadable, examined)  # a filter's page may be short
            start_key = reply.get("LastEvaluatedKey")
            if not start_key:
                return Page(items, None, unreadable, examined)

    def replace_job(
        self,
        job: Job,
        expected_version: int,
        timers: Sequence[Timer] = (),
        *,
        previous_trigger_rate: int | None = None,
        max_trigger_rate: int | None = None,
        parents_added: Sequence[str] = (),
        parents_removed: Sequence[str] = (),
        calendars: CalendarUses = NO_CALENDAR_USES,
        graph: GraphRead | None = None,
    ) -> None:
        delta = 0 if previous_trigger_rate is None else job.trigger_rate - previous_trigger_rate
        if delta > 0 and max_trigger_rate is not None and delta > max_trigger_rate:
            raise TriggerRateLimitError(max_trigger_rate, None, delta)
        if timers:
            self.check_layout()
        attrs = self._job_attrs(job)
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": schema.job_key(job.tenant, job.id),
                    **schema.replace_job(attrs, expected_version).fields(),
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            {
                "Put": {
                    "TableName": self.table,
                    "Item": {
                        **schema.listing_key(job.tenant, job.id),
                        "state": attrs["state"],
                        "doc": attrs["doc"],
                    },
                }
            },
        ]
        if delta:
            items.append({"Update": self._meta_update(job.tenant, 0, None, delta, max_trigger_rate)})
        at = None  # the graph item's place, for its cancellation reason
        if graph is not None:
            at = len(items)
            advance = dependency_schema.advance_graph(graph.version)
            items.append(
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": dependency_schema.graph_key(job.tenant),
                        **advance.fields(),
                    }
                }
            )
        items.extend({"Put": {"TableName": self.table, "Item": self._timer_item(t)}} for t in timers)
        versions = graph.parents if graph is not None else {}
        links = {
            **{parent: self._remove_link(job.tenant, parent, job.id) for parent in parents_removed},
            **{
                parent: self._add_link(job.tenant, parent, job.id, versions.get(parent))
                for parent in parents_added
            },
        }
        try:
            self._versioned_transaction(items, job.tenant, job.id, expected_version, calendars, links)
        except ClientError as exc:
            reasons = exc.response.get("CancellationReasons", [])
            if delta and len(reasons) > 2 and reasons[2].get("Code") == "ConditionalCheckFailed":
                raise self._quota_error(reasons[2].get("Item") or {}, None, delta, max_trigger_rate) from None
            if at is not None and len(reasons) > at and reasons[at].get("Code") == "ConditionalCheckFailed":
                raise GraphChangedError(
                    f"tenant {job.tenant!r}: the job dependencies changed meanwhile"
                ) from None
            raise

    def delete_job(
        self,
        tenant: str,
        job_id: str,
        expected_version: int | None = None,
        trigger_rate: int = 0,
        parents: Sequence[str] = (),
        *,
        calendars: CalendarUses = NO_CALENDAR_USES,
        tombstone_until: int | None = None,
        expected_dependents: int | None = None,
    ) -> None:
        delete: dict[str, Any] = {
            "TableName": self.table,
            "Key": schema.job_key(tenant, job_id),
            **schema.delete_job(expected_version, expected_dependents).fields(),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        items = [
            {"Delete": delete},
            {
                "Delete": {
                    "TableName": self.table,
                    "Key": schema.listing_key(tenant, job_id),
                }
            },
            {"Update": self._meta_update(tenant, -1, None, -trigger_rate, None)},
        ]
        if expected_version is not None and tombstone_until is not None:  # a next job here starts past it
            tomb = schema.tombstone_item(tenant, job_id, expected_version, tombstone_until)
            items.append({"Put": {"TableName": self.table, "Item": tomb}})
        links = {parent: self._remove_link(tenant, parent, job_id) for parent in parents}
        self._versioned_transaction(items, tenant, job_id, expected_version, calendars, links)

    def drop_listing_without_job(self, tenant: str, job_id: str) -> bool:
        absent = {"TableName": self.table, "Key": schema.job_key(tenant, job_id), **schema.CREATE.fields()}
        listing = {
            "TableName": self.table,
            "Key": schema.listing_key(tenant, job_id),
            **schema.EXISTS.fields(),
        }
        try:
            self._transact([{"ConditionCheck": absent}, {"Delete": listing}])
        except ClientError as exc:
            if exc.response["Error"]["Code"] in (
                "TransactionCanceledException",
                "ConditionalCheckFailedException",
            ):
                return False  # a job is there (a create landed meanwhile), or no listing
            raise
        return True

    def first_version(self, tenant: str, job_id: str) -> int:
        item = self.client.get_item(
            TableName=self.table, Key=schema.tombstone_key(tenant, job_id), ConsistentRead=True
        ).get("Item")
        return int(item["version"]["N"]) + 1 if item and "version" in item else 1

    def tenant_trigger_rate(self, tenant: str) -> int:
        item = self.client.get_item(
            TableName=self.table,
            Key=schema.tenant_meta_key(tenant),
            ConsistentRead=True,
        ).get("Item")
        return int(item["trigger_rate"]["N"]) if item and "trigger_rate" in item else 0

    def count_request(self, tenant: str, window: str, limit: int, ttl_epoch_s: int) -> bool:
        return self._write_if(
            "update_item",
            Key=schema.requests_key(tenant, window),
            **schema.count_request(limit, ttl_epoch_s).fields(),
        )

    def _versioned_transaction(
        self,
        items: list[dict[str, Any]],
        tenant: str,
        job_id: str,
        expected_version: int | None,
        calendars: CalendarUses,
        links: dict[str, list[dict[str, Any]]] | None = None,
    ) -> None:
        """Run a transaction whose first item is conditional on the job's version (with the
        job's calendar uses and its links as a dependent, :mod:`.calendar_uses`)."""
        try:
            self._transact_job_write(items, tenant, job_id, calendars, links)
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
                Key=schema.job_key(tenant, job_id),
                **schema.add_skipped(count).fields(),
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise


# The item's attributes kept beside the document: (attribute, field, its value from the attribute)
_BESIDE: tuple[tuple[str, str, Callable[[dict[str, str]], object]], ...] = (
    ("dependents", "dependents", lambda value: int(value["N"])),
    ("tpm", "trigger_rate", lambda value: int(value["N"])),
    ("secret", "signing_secret_enc", lambda value: value["S"]),
    ("secret_prev", "signing_secret_prev_enc", lambda value: value["S"]),
)


def _whole_job(item: dict[str, Any], document: str) -> Job | None:
    """The job of an item whose document, read alone, says all the job holds (the usual item: the
    version, state and skipped count it reads agree with the attributes, and it holds none of the
    fields kept beside it; a field it leaves out reads as its default, :mod:`.job_documents`), read
    by one JSON validation of the document, its noted document; None for any
    other item, or a document that does not validate as it is (:meth:`DynamoJobs._job_from_item`
    then reads it as a dict merged with the attributes, and decides; the same job either way).

    Why: the general read parses the document into a dict, merges the attributes into it and
    validates the dict, which costs the poller about 5 µs more per job than validating the JSON
    text at once (``tests/unit/test_hot_path_marshalling.py`` checks the two read the same job)."""
    if not document.endswith("}"):
        return None
    try:
        job = read_accepted(document)  # accepted when written
    except ValidationError:
        return None
    held = job.__pydantic_fields_set__  # the fields the document holds
    skipped = item.get("skipped")
    if (
        job.version != int(item["version"]["N"])
        or job.state != item["state"]["S"]  # (a StrEnum: equal to its value)
        or (skipped is not None and job.skipped_slots != int(skipped["N"]))
        or not KEPT_BESIDE.isdisjoint(held)
    ):
        return None
    held.update(("version", "state", "skipped_slots") if skipped is not None else ("version", "state"))
    for attribute, field, value_of in _BESIDE:
        if attribute in item:  # (typed by the attribute itself: a number, a string)
            job.__dict__[field] = value_of(item[attribute])
            held.add(field)
    note_document(job, document)
    return job


def _known_part(item: dict[str, Any], data: dict[str, Any], exc: ValidationError) -> Job:
    """The job of a document whose only fault is fields this version does not know (a newer
    version wrote them: a rollback), read without them and logged; else UnreadableJobError."""
    removed: list[tuple[tuple[Any, ...], Any]] = []
    known = without_unknown_fields(data, exc.errors(), removed)
    if known is not None:
        try:
            job = Job.model_validate(known, context=ACCEPTED)
        except ValidationError:
            pass
        else:
            newer_fields.keep(job, removed)  # put back by this version's next write of it
            unknown = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors()[:5])
            log.warning("job %s: read without the fields this version does not know: %s", job.id, unknown)
            return job
    raise UnreadableJobError(_unreadable(item, data, _first_errors(exc))) from None
