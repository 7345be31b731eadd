"""What the chain auditor reads in DynamoDB: the audit index's segments, a job's turn; and the
enrolment of job items written before the index existed.

The index (``audit``, :mod:`.schema`) is sparse: only job items and running backfills carry its
key ``aseg``, so timers and execution records, the hot path's writes, never touch it. It projects
what the auditor needs of an item (``version``, ``state``, ``doc``, ``rev``): a segment is read
by one paged Query, eventually consistent like every index read; the auditor re-reads a job
strongly consistently before it calls anything broken.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
from typing import Any

from punctual.models import Job
from punctual.store.base import AuditRepository, Page, Turn, UnreadableJob, UnreadableJobError
from punctual.store.dynamo import schema
from punctual.store.dynamo.executions import DynamoExecutions
from punctual.store.dynamo.jobs import DynamoJobs
from punctual.timing.timers import Lane
from punctual.usecases.backfills import Backfill

log = logging.getLogger("punctual.store")


def _cursor_of(key: dict[str, Any] | None) -> str | None:
    """An opaque cursor for a LastEvaluatedKey (the index's and the table's keys)."""
    if not key:
        return None
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode()


def _key_of(cursor: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    return value


class DynamoAudit(DynamoJobs, AuditRepository):
    """The audit index and a job's turn, read for the chain auditor."""

    def audit_page(
        self, segment: int, segments: int, limit: int, cursor: str | None = None
    ) -> Page[Job | Backfill]:
        request: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": schema.AUDIT_INDEX,
            **schema.audit_segment(segment).fields(),
            "Limit": max(1, limit),
        }
        if cursor:
            request["ExclusiveStartKey"] = _key_of(cursor)
        reply = self.client.query(**request)
        items: list[Job | Backfill] = []
        unreadable: list[UnreadableJob] = []
        for item in reply.get("Items", []):
            try:
                found = self._audit_item(item)
            except UnreadableJobError as exc:
                tenant, job_id = schema.job_of_pk(item["pk"]["S"])
                unreadable.append(dataclasses.replace(exc.job, tenant=tenant, id=job_id))
                continue
            if found is not None:
                items.append(found)
        return Page(items, _cursor_of(reply.get("LastEvaluatedKey")), unreadable)

    def _audit_item(self, item: dict[str, Any]) -> Job | Backfill | None:
        sk = item["sk"]["S"]
        if sk == "job":
            return self._job_from_item(item)
        if sk.startswith("backfill#") and "doc" in item:
            return Backfill.model_validate_json(item["doc"]["S"])
        return None

    def get_turn(self, tenant: str, job_id: str) -> Turn | None:
        item = self.client.get_item(
            TableName=self.table, Key=schema.turn_key(tenant, job_id), ConsistentRead=True
        ).get("Item")
        return DynamoExecutions._turn_of(item) if item else None

    def enrol_for_audit(self, segment: int, segments: int) -> int:
        """Give every job item of table scan segment ``segment`` of ``segments`` that has no
        audit segment yet its own (items written before the index, or by a store without a
        layout). Idempotent and resumable by segment; returns how many it enrolled.

        A full table scan: run once after upgrading a deployment that holds jobs (README,
        *Chain auditor*), one invocation per scan segment.
        """
        if self.layout is None:
            raise ValueError("enrolling jobs for the audit needs the deployment's timer layout")
        request: dict[str, Any] = {
            "TableName": self.table,
            "Segment": segment,
            "TotalSegments": segments,
            **schema.unenrolled_jobs().fields(),
        }
        enrolled = 0
        while True:
            reply = self.client.scan(**request)
            for item in reply.get("Items", []):
                tenant, job_id = schema.job_of_pk(item["pk"]["S"])
                shard = self.layout.shard_for(Lane.FAR, tenant, job_id)
                key = schema.job_key(tenant, job_id)
                if self._write_if("update_item", Key=key, **schema.enrol_for_audit(shard).fields()):
                    enrolled += 1
            last = reply.get("LastEvaluatedKey")
            if not last:
                return enrolled
            request["ExclusiveStartKey"] = last
