"""The DynamoDB JobStore: one table, ``pk``/``sk`` strings, TTL attribute ``expires_at``.

One implementation per aggregate, each a mixin over :class:`~.base.DynamoBase`: jobs
(:mod:`.jobs`; new ones a group at a time, :mod:`.job_groups`), timers, watermarks and progress
(:mod:`.timers`), executions and turns (:mod:`.executions`), dependencies (:mod:`.dependencies`),
the chain auditor's reads (:mod:`.audit`), schedule groups (:mod:`.groups`), alerts
(:mod:`.alerts`), calendars and backfills (:mod:`.calendars`). Every item's key and every
expression is built in :mod:`.schema` (which lists the items); shared helpers in :mod:`.keys`.

A job's history is one query on its partition (``exec#`` prefix, newest first).
"""

from __future__ import annotations

from punctual.store.base import JobStore
from punctual.store.dynamo.alerts import DynamoAlerts
from punctual.store.dynamo.audit import DynamoAudit
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.calendars import DynamoCalendars
from punctual.store.dynamo.dependencies import DynamoDependencies
from punctual.store.dynamo.executions import DynamoExecutions
from punctual.store.dynamo.groups import DynamoGroups
from punctual.store.dynamo.inflight import DynamoRunsInFlight
from punctual.store.dynamo.job_groups import DynamoJobGroups
from punctual.store.dynamo.jobs import DynamoJobs
from punctual.store.dynamo.keyring import DynamoKeyring
from punctual.store.dynamo.keys import WATERMARK_CHUNK, job_pk, table_definition, tenant_pk
from punctual.store.dynamo.loads import DynamoLoads
from punctual.store.dynamo.quotas import DynamoTenantQuotas
from punctual.store.dynamo.reservations import DynamoBudgetReservations
from punctual.store.dynamo.timers import DynamoTimers


class DynamoStore(
    DynamoAudit,
    DynamoJobGroups,
    DynamoJobs,
    DynamoTimers,
    DynamoExecutions,
    DynamoDependencies,
    DynamoGroups,
    DynamoAlerts,
    DynamoCalendars,
    DynamoTenantQuotas,
    DynamoKeyring,
    DynamoLoads,
    DynamoBudgetReservations,
    DynamoRunsInFlight,
    JobStore,
):
    """JobStore over one DynamoDB table: every aggregate's implementation, on one client."""


__all__ = [
    "WATERMARK_CHUNK",
    "DynamoAlerts",
    "DynamoAudit",
    "DynamoBase",
    "DynamoCalendars",
    "DynamoDependencies",
    "DynamoExecutions",
    "DynamoGroups",
    "DynamoJobs",
    "DynamoStore",
    "DynamoTimers",
    "job_pk",
    "table_definition",
    "tenant_pk",
]
