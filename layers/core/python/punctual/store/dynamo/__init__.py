"""The DynamoDB JobStore: one table, ``pk``/``sk`` strings, TTL attribute ``expires_at``.

One implementation per aggregate, each a mixin over :class:`~.base.DynamoBase`: jobs
(:mod:`.jobs`), timers, watermarks and progress (:mod:`.timers`), executions and turns
(:mod:`.executions`), dependencies (:mod:`.dependencies`); keys, attribute values and shared
helpers in :mod:`.keys`. This package is the only code that builds DynamoDB keys and expressions.

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

from punctual.store.base import JobStore
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.dependencies import DynamoDependencies
from punctual.store.dynamo.executions import DynamoExecutions
from punctual.store.dynamo.jobs import DynamoJobs
from punctual.store.dynamo.keys import WATERMARK_CHUNK, job_pk, table_definition, tenant_pk
from punctual.store.dynamo.timers import DynamoTimers


class DynamoStore(DynamoJobs, DynamoTimers, DynamoExecutions, DynamoDependencies, JobStore):
    """JobStore over one DynamoDB table: every aggregate's implementation, on one client."""


__all__ = [
    "WATERMARK_CHUNK",
    "DynamoBase",
    "DynamoDependencies",
    "DynamoExecutions",
    "DynamoJobs",
    "DynamoStore",
    "DynamoTimers",
    "job_pk",
    "table_definition",
    "tenant_pk",
]
