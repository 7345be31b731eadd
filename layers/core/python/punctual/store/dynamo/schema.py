"""The DynamoDB table's schema: every item's key and every condition, update and key-condition
expression the store sends, in one module. The mixins beside it (:mod:`.jobs`, :mod:`.timers`,
:mod:`.executions`, :mod:`.dependencies`) only put these together into requests and read the
answers; a reviewer checks the store's invariants here (the calendars' and the dependencies' in
:mod:`.calendar_schema` and :mod:`.dependency_schema`).

Items (one table, ``pk``/``sk`` strings, TTL attribute ``expires_at``)::

    job          pk=job#<tenant>#<id>      sk=job            version, state, doc (JSON), tpm,
                                                             secret, secret_prev, skipped, dependents,
                                                             aseg (its audit segment)
    listing      pk=tenant#<tenant>        sk=job#<id>       state, doc   (a tenant's jobs, one query)
    tombstone    pk=job#<tenant>#<id>      sk=tomb           version (a deleted job's last), expires_at
    sched. group pk=tenant#<tenant>        sk=group#<name>   name, state, created_at, updated_at, tags, token
    job count    pk=tenant#<tenant>        sk=#meta          job_count, trigger_rate (micro/min)
    API requests pk=reqs#<tenant>          sk=<window>       n, expires_at (per-tenant rate limit)
    execution    pk=job#<tenant>#<id>      sk=exec#<slot>    status, attempt, owner, doc, expires_at
    turn         pk=job#<tenant>#<id>      sk=turn           holder, since, waiting (string set)
    dependency   pk=job#<tenant>#<child>   sk=dep#<slot>     parents (string set), dispatched
    dependent    pk=job#<tenant>#<parent>  sk=child#<child>
    dep. graph   pk=tenant#<tenant>        sk=#graph         v (moves on with each parent a job gains)
    alert        pk=job#<tenant>#<id>      sk=alert#<slot>#<condition>  st, owner, claimed, doc, expires_at
    streak       pk=job#<tenant>#<id>      sk=streak         first (slot): the job fails since then,
                                                             n (failures in it), last (the latest)
    throttle     pk=job#<tenant>#<id>      sk=throttle#<rule>  last (ms), held (alert min_interval)
    timer        pk=timer|near#<minute>#<shard>  sk=<due ms>#<tenant>#<job>#<slot>#<attempt>
    timer pack   pk=timer|near#<minute>#<shard>  sk=<window ms>#~<digest>  tm (JSON), n, nf (load: LOAD_KINDS)
    watermark    pk=wm#<lane>#<chunk>      sk=wm             m: {shard: minute}
    progress     pk=progress#<minute>      sk=<group>/<count> through_ms, expires_at
    layout       pk=meta#layout            sk=layout         far, near (shard counts)
    key moves    pk=meta#migrate-keys      sk=<segment>/<segments>  last (JSON), done, counts
                                                             (punctual.admin.key_migration)
    calendar     pk=tenant#<tenant>        sk=cal#<name>     version, doc, user_count (and users: the
                                                             string set of job ids earlier versions kept)
    cal. use     pk=tenant#<tenant>        sk=caluse#<name>#<job>  (one item per job that excludes it)
    backfill     pk=job#<tenant>#<id>      sk=backfill#<bid> rev, state, doc, aseg (while RUNNING)
    peaks        pk=tenant#<tenant>        sk=#peaks         version, doc (punctual.security.peaks profile)
    backfills    pk=tenant#<tenant>        sk=#backfills     running (string set: <job>/<bid>)
    bf. slots    pk=reqs#<tenant>          sk=backfill#<window>  n, expires_at (slots sent a minute)
    minute load  pk=load#<minute>#<shard>  sk=load            t, h (slots due, in its head), expires_at
    tenant key   pk=tkey#<tenant>          sk=epoch#<n>      wrapped (the KMS-wrapped data key), created_at
    in flight    pk=flight#<lane>/<tenant>#<window>#<shard>  sk=n  n (runs that beat in the
                                                             window), expires_at (punctual.execution.inflight)
    near cap     pk=flight#hot#<window>    sk=n              s (string set: <lane>/<tenant> near its cap;
                                                             both in :mod:`.inflight_schema`)
    budget inst. pk=rate#<tenant>#<target>#<minute>  sk=<epoch us, 17 digits>  owner (the slot that
                                                             holds it: <job>/<slot>), expires_at
                                                             (punctual.dispatch.budget_reservations)

The one index, ``audit`` (sparse: only job items and running backfills carry ``aseg``, so no timer
or execution write ever touches it): partition ``aseg`` (N, the job's far shard: the chain
auditor's segment), sort ``pk``, projecting ``version``, ``state``, ``doc`` and ``rev``.

A job's history is one query on its partition (``exec#`` prefix, newest first).

An :class:`Expression` is the expression part of a request (``UpdateExpression``,
``ConditionExpression``, ``KeyConditionExpression``, ``FilterExpression``,
``ProjectionExpression`` and their names and values); ``**expr.fields()`` spreads it into a
boto3 call or a transaction item.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from punctual.models import Job
from punctual.models.job_documents import stored_document
from punctual.store.dynamo.newer_fields import with_kept
from punctual.timing.timers import minute_key


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _n(value: int | float) -> dict[str, str]:
    return {"N": str(value)}


# ---------------------------------------------------------------------------- keys

EXEC_PREFIX = "exec#"
LISTING_PREFIX = "job#"
GROUP_PREFIX = "group#"


def job_pk(tenant: str, job_id: str) -> str:
    return f"job#{tenant}#{job_id}"


def tenant_pk(tenant: str) -> str:
    return f"tenant#{tenant}"


Key = dict[str, dict[str, str]]


def _key(pk: str, sk: str) -> Key:
    return {"pk": _s(pk), "sk": _s(sk)}


def group_sk(name: str) -> str:
    """A schedule group's sort key in its tenant's listing partition (names sort as they are)."""
    return f"{GROUP_PREFIX}{name}"


def group_key(tenant: str, name: str) -> Key:
    return _key(tenant_pk(tenant), group_sk(name))


def job_key(tenant: str, job_id: str) -> Key:
    return _key(job_pk(tenant, job_id), "job")


def tombstone_key(tenant: str, job_id: str) -> Key:
    """What a deleted job leaves at its id for a while: its last version (``first_version``)."""
    return _key(job_pk(tenant, job_id), "tomb")


def tombstone_item(tenant: str, job_id: str, version: int, expires_at: int) -> dict[str, Any]:
    return {**tombstone_key(tenant, job_id), "version": _n(version), "expires_at": _n(expires_at)}


def listing_key(tenant: str, job_id: str) -> Key:
    return _key(tenant_pk(tenant), f"{LISTING_PREFIX}{job_id}")


def tenant_meta_key(tenant: str) -> Key:
    return _key(tenant_pk(tenant), "#meta")


def requests_key(tenant: str, window: str) -> Key:
    return _key(f"reqs#{tenant}", window)


def execution_key(tenant: str, job_id: str, slot: str) -> Key:
    return _key(job_pk(tenant, job_id), f"{EXEC_PREFIX}{slot}")


def turn_key(tenant: str, job_id: str) -> Key:
    return _key(job_pk(tenant, job_id), "turn")


def pack_key(bucket: str, window_start: str, digest: str) -> Key:
    """A timer pack's key: its bucket, its window's first instant (as a timer's sort key
    starts) and a digest of its entries, so rewriting the same set writes the same item."""
    return _key(bucket, f"{window_start}#~{digest}")


ALERT_PREFIX = "alert#"


def alert_key(tenant: str, job_id: str, key_slot: str, condition: str) -> Key:
    """An alert's key: newest slot first in a reverse query of the ``alert#`` prefix."""
    return _key(job_pk(tenant, job_id), f"{ALERT_PREFIX}{key_slot}#{condition}")


def streak_key(tenant: str, job_id: str) -> Key:
    return _key(job_pk(tenant, job_id), "streak")


def throttle_key(tenant: str, job_id: str, rule: int) -> Key:
    return _key(job_pk(tenant, job_id), f"throttle#{rule}")


def watermark_key(lane: str, chunk: int, scope: str = "") -> Key:  # a Region's own: wm#<scope>#...
    return _key(f"wm#{scope}#{lane}#{chunk}" if scope else f"wm#{lane}#{chunk}", "wm")


def progress_pk(minute: datetime, scope: str = "") -> str:
    return f"progress#{scope}#{minute_key(minute)}" if scope else f"progress#{minute_key(minute)}"


def progress_key(minute: datetime, group: int, group_count: int, scope: str = "") -> Key:
    return _key(progress_pk(minute, scope), f"{group}/{group_count}")


LAYOUT_KEY: Key = _key("meta#layout", "layout")
MIGRATION_PK = "meta#migrate-keys"


def migration_key(segment: int, segments: int) -> Key:
    """The progress of one segment of a timer key migration's parallel scan."""
    return _key(MIGRATION_PK, f"{segment}/{segments}")


def minute_load_key(minute: datetime, shard: int) -> Key:
    """One of a minute's load counters (:mod:`punctual.dispatch.load_forecast`)."""
    return _key(f"load#{minute_key(minute)}#{shard}", "load")


def add_minute_load(total: int, head: int, expires_at: int, ecs: int = 0) -> Expression:
    """Add to a minute's load counters, ECS lane's apart (negative: take back); kept a day on."""
    return Expression(
        update="ADD t :t, h :h, e :e SET expires_at = :exp",
        values={":t": _n(total), ":h": _n(head), ":e": _n(ecs), ":exp": _n(expires_at)},
    )


def budget_pk(tenant: str, key: str, minute: datetime) -> str:
    """The partition of a rate budget's reserved instants in one minute (a query reads a range)."""
    return f"rate#{tenant}#{key}#{minute_key(minute)}"


def budget_sk(epoch_us: int) -> str:
    """An instant's sort key: microseconds since the epoch, zero-padded (sorts as it counts)."""
    return f"{epoch_us:017d}"


def budget_instant_key(tenant: str, key: str, minute: datetime, epoch_us: int) -> Key:
    return _key(budget_pk(tenant, key, minute), budget_sk(epoch_us))


def reserve_budget_instant(owner: str, expires_at: int) -> Expression:
    """Take a budget's instant for ``owner``: only when it is free or already ``owner``'s."""
    return Expression(
        update="SET #o = :o, expires_at = :exp",
        condition="attribute_not_exists(pk) OR #o = :o",
        names={"#o": "owner"},
        values={":o": _s(owner), ":exp": _n(expires_at)},
    )


def budget_range(pk: str, low_us: int, high_us: int) -> Expression:
    """A query of a budget's reserved instants from ``low_us`` to ``high_us`` in one partition."""
    return Expression(
        key_condition="pk = :pk AND sk BETWEEN :lo AND :hi",
        projection="sk, #o",
        names={"#o": "owner"},
        values={":pk": _s(pk), ":lo": _s(budget_sk(low_us)), ":hi": _s(budget_sk(high_us))},
    )


def tenant_key_key(tenant: str, epoch: int) -> Key:
    """A tenant's wrapped data key of one key epoch (:mod:`punctual.security.tenant_keys`)."""
    return _key(f"tkey#{tenant}", f"epoch#{epoch:08d}")


# ---------------------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Expression:
    """The expression part of one DynamoDB request; empty parts are left out of :meth:`fields`."""

    update: str | None = None
    condition: str | None = None
    key_condition: str | None = None
    filter: str | None = None
    projection: str | None = None
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        parts = {
            "UpdateExpression": self.update,
            "ConditionExpression": self.condition,
            "KeyConditionExpression": self.key_condition,
            "FilterExpression": self.filter,
            "ProjectionExpression": self.projection,
            "ExpressionAttributeNames": dict(self.names) or None,
            "ExpressionAttributeValues": dict(self.values) or None,
        }
        return {name: value for name, value in parts.items() if value is not None}


# A put that must create its item (never overwrites one), and a write that must find it.
CREATE = Expression(condition="attribute_not_exists(pk)")
EXISTS = Expression(condition="attribute_exists(pk)")
# A transaction's ConditionCheck written alone (.sequenced): an update of an attribute no item has.
UNCHANGED = Expression(update="REMOVE #check", names={"#check": "__condition_check__"})


def partition(pk: str, prefix: str | None = None) -> Expression:
    """A query of one partition, optionally only the sort keys starting with ``prefix``."""
    if prefix is None:
        return Expression(key_condition="pk = :pk", values={":pk": _s(pk)})
    return Expression(
        key_condition="pk = :pk AND begins_with(sk, :pre)", values={":pk": _s(pk), ":pre": _s(prefix)}
    )


# ------------------------------------------------------------- the audit index

AUDIT_INDEX = "audit"
AUDIT_SEGMENT = "aseg"  # the attribute that puts an item in the index: its audit segment (N)
AUDIT_PROJECTION = ("version", "state", "doc", "rev")


def audit_index_definition() -> dict[str, Any]:
    """The audit index as CreateTable declares it (the CDK app declares the same)."""
    return {
        "IndexName": AUDIT_INDEX,
        "KeySchema": [
            {"AttributeName": AUDIT_SEGMENT, "KeyType": "HASH"},
            {"AttributeName": "pk", "KeyType": "RANGE"},
        ],
        "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(AUDIT_PROJECTION)},
    }


def audit_segment(segment: int) -> Expression:
    """The audit index's items of one segment (a query of one index partition)."""
    return Expression(key_condition="aseg = :seg", values={":seg": _n(segment)})


def audit_attrs(segment: int | None) -> dict[str, Any]:
    """The attribute that enrols an item in the audit index (none when the segment is unknown)."""
    return {} if segment is None else {AUDIT_SEGMENT: _n(segment)}


def unenrolled_jobs() -> Expression:
    """A scan's filter: job items without an audit segment (only their key is read back)."""
    return Expression(
        filter="sk = :job AND attribute_not_exists(aseg)", projection="pk", values={":job": _s("job")}
    )


def job_of_pk(pk: str) -> tuple[str, str]:
    """(tenant, job id) of a job partition's key (a job id holds no ``#``)."""
    tenant, _, job_id = pk.removeprefix("job#").rpartition("#")
    return tenant, job_id


def enrol_for_audit(segment: int) -> Expression:
    """Give a job item that predates the index its segment (it must still exist)."""
    return Expression(
        update="SET aseg = :seg", condition="attribute_exists(pk)", values={":seg": _n(segment)}
    )


# ------------------------------------------------------------- jobs and tenant counters


def tenant_counters(jobs: int, max_jobs: int | None, rate: int, max_rate: int | None) -> Expression:
    """``jobs`` more jobs and ``rate`` more micro-triggers a minute on the tenant's counter item.

    Adding is refused (conditional) when the job count after adding would pass ``max_jobs`` or
    when the total rate after adding would pass ``max_rate``; removing is never refused.
    """
    update = "ADD #tr :rate" + (", job_count :jobs" if jobs else "")
    values: dict[str, Any] = {":rate": _n(rate)}
    conditions: list[str] = []
    if jobs:
        values[":jobs"] = _n(jobs)
    if jobs > 0 and max_jobs is not None:
        # The count after adding may not pass the quota: count <= max - jobs (a group adds many).
        conditions.append("(attribute_not_exists(job_count) OR job_count <= :max)")
        values[":max"] = _n(max_jobs - jobs)
    if rate > 0 and max_rate is not None:
        # The total after adding may not pass the quota: total <= max - rate.
        conditions.append("(attribute_not_exists(#tr) OR #tr <= :room)")
        values[":room"] = _n(max_rate - rate)
    return Expression(
        update=update,
        condition=" AND ".join(conditions) or None,
        names={"#tr": "trigger_rate"},
        values=values,
    )


def replace_job(attrs: dict[str, Any], expected_version: int) -> Expression:
    """Replace the job item's attributes only if it is still at ``expected_version``."""
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
    if AUDIT_SEGMENT in attrs:
        update += ", aseg = :seg"
        values[":seg"] = attrs[AUDIT_SEGMENT]
    if "secret_prev" in attrs:
        update += ", secret_prev = :prev"
        values[":prev"] = attrs["secret_prev"]
    else:
        update += " REMOVE secret_prev"
    return Expression(
        update=update,
        condition="#v = :exp",
        names={"#v": "version", "#st": "state", "#d": "doc"},
        values=values,
    )


def delete_job(expected_version: int | None, expected_dependents: int | None = None) -> Expression:
    """Delete the job item if it exists (and, when given, is still at ``expected_version`` and
    has ``expected_dependents`` after() children linked: a link added since fails it)."""
    if expected_version is None and expected_dependents is None:
        return EXISTS
    condition, values = "attribute_exists(pk)", {}
    if expected_version is not None:
        condition += " AND version = :exp"
        values[":exp"] = _n(expected_version)
    if expected_dependents is not None:
        condition += " AND (dependents = :deps" + (
            " OR attribute_not_exists(dependents))" if expected_dependents == 0 else ")"
        )
        values[":deps"] = _n(expected_dependents)
    return Expression(condition=condition, values=values)


def count_request(limit: int, ttl_epoch_s: int) -> Expression:
    """One more API request in the window, refused once the window holds ``limit``."""
    return Expression(
        update="ADD n :one SET expires_at = if_not_exists(expires_at, :ttl)",
        condition="attribute_not_exists(n) OR n < :limit",
        values={":one": _n(1), ":limit": _n(limit), ":ttl": _n(ttl_epoch_s)},
    )


def add_skipped(count: int) -> Expression:
    """Count skipped slots on a job that still exists (never recreates a deleted one)."""
    return Expression(update="ADD skipped :n", condition="attribute_exists(pk)", values={":n": _n(count)})


# ------------------------------------------------------------- timers, watermarks, progress


def timer_range(pk: str, low: str | None, high: str | None) -> Expression:
    """A bucket's timers with sort keys in [low, high] (either bound may be open)."""
    values: dict[str, Any] = {":pk": _s(pk)}
    condition = "pk = :pk"
    if low is not None and high is not None:
        condition += " AND sk BETWEEN :lo AND :hi"
        values[":lo"], values[":hi"] = _s(low), _s(high)
    elif low is not None:
        condition += " AND sk >= :lo"
        values[":lo"] = _s(low)
    elif high is not None:
        condition += " AND sk <= :hi"
        values[":hi"] = _s(high)
    return Expression(key_condition=condition, values=values)


def timer_items() -> Expression:
    """A scan's filter: timer rows and packs only (both lanes), whatever their bucket."""
    return Expression(
        filter="begins_with(pk, :far) OR begins_with(pk, :near)",
        values={":far": _s("timer#"), ":near": _s("near#")},
    )


def migration_progress(last: str | None, done: bool, counts: dict[str, int]) -> Expression:
    """Record how far a segment of the key migration got: its scan's last key (``None``: from the
    start) and its counts so far."""
    names = {"#dn": "done", "#last": "last"}
    values: dict[str, Any] = {":done": {"BOOL": done}}
    sets = ["#dn = :done"]
    for i, (name, count) in enumerate(counts.items()):
        names[f"#c{i}"] = name
        values[f":c{i}"] = _n(count)
        sets.append(f"#c{i} = :c{i}")
    update = "SET " + ", ".join(sets)
    if last is None:
        update += " REMOVE #last"
    else:
        update += ", #last = :last"
        values[":last"] = _s(last)
    return Expression(update=update, names=names, values=values)


def timer_counts(pk: str) -> Expression:
    """A bucket's items, only what counts its load: a pack's timer count (``n``) and load count
    (``nf``, :data:`punctual.timing.timers.LOAD_KINDS`; packs written before it have only ``n``), a lone
    timer row's kind."""
    return Expression(
        key_condition="pk = :pk", projection="n, nf, #k", names={"#k": "kind"}, values={":pk": _s(pk)}
    )


def advance_watermarks(shards: Sequence[int], target: str) -> Expression:
    """Move each shard's watermark to ``target``: conditional on every one being behind it,
    so a watermark never moves backward (the caller retries with the shards still behind)."""
    names = {f"#s{i}": str(shard) for i, shard in enumerate(shards)}
    sets = ", ".join(f"m.#s{i} = :m" for i in range(len(shards)))
    checks = " AND ".join(f"(attribute_not_exists(m.#s{i}) OR m.#s{i} < :m)" for i in range(len(shards)))
    return Expression(update=f"SET {sets}", condition=checks, names=names, values={":m": _s(target)})


def advance_progress(through_ms: int, expires_at: int) -> Expression:
    """Move a progress mark forward to ``through_ms``; never back."""
    return Expression(
        update="SET through_ms = :t, expires_at = :e",
        condition="attribute_not_exists(through_ms) OR through_ms < :t",
        values={":t": _n(through_ms), ":e": _n(expires_at)},
    )


def advance_sent_bound(sent_to_ms: int, expires_at: int) -> Expression:
    """Move a progress item's send bound (:mod:`punctual.store.progress`) forward; never back."""
    return Expression(
        update="SET sent_to_ms = :s, expires_at = :e",
        condition="attribute_not_exists(sent_to_ms) OR sent_to_ms < :s",
        values={":s": _n(sent_to_ms), ":e": _n(expires_at)},
    )


# ------------------------------------------------------------- executions and turns


def save_execution(
    statuses: Iterable[str] | None,
    attempt: int | None,
    owner: str | None,
    check_owner: bool,
    *,
    new: bool,
) -> Expression:
    """The condition of an execution record's write: every status transition is one of these.

    ``new``: the record must not exist yet (the first claim of a slot). Otherwise it must
    exist, and, each when given, be in one of ``statuses``, at ``attempt``, and held by
    ``owner`` (or, with ``check_owner`` and no owner, held by nobody).
    """
    if new:
        return CREATE
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    parts = ["attribute_exists(pk)"]
    keys = []
    for i, status in enumerate(sorted(statuses or ())):
        values[f":st{i}"] = _s(status)
        keys.append(f":st{i}")
    if keys:
        names["#st"] = "status"
        parts.append(f"#st IN ({', '.join(keys)})")
    if attempt is not None:
        parts.append("attempt = :att")
        values[":att"] = _n(attempt)
    if owner is not None:
        names["#ow"] = "owner"
        parts.append("#ow = :ow")
        values[":ow"] = _s(owner)
    elif check_owner:
        names["#ow"] = "owner"
        parts.append("attribute_not_exists(#ow)")
    return Expression(condition=" AND ".join(parts), names=names, values=values)


def expired(item: dict[str, Any], live_at: int | None) -> bool:
    """Whether the item's TTL (``expires_at``) passed by ``live_at``: DynamoDB deletes such an item
    lazily (up to days later), and until then reads still return it."""
    expires = item.get("expires_at", {}).get("N")
    return live_at is not None and expires is not None and int(expires) < live_at


def history(tenant: str, job_id: str, status: str | None) -> Expression:
    """A job's execution records (optionally only those in ``status``)."""
    base = partition(job_pk(tenant, job_id), EXEC_PREFIX)
    if status is None:
        return base
    return Expression(
        key_condition=base.key_condition,
        filter="#st = :st",
        names={"#st": "status"},
        values={**base.values, ":st": _s(status)},
    )


def take_turn(slot: str, now: datetime, replacing: str | None) -> Expression:
    """``slot`` takes the job's turn if nobody holds it, it holds it already, or (when given)
    ``replacing`` holds it; leaves the waiting set. ``since`` is kept when the holder takes
    the turn again and restarted when it takes the turn over from a stale holder."""
    condition = "attribute_not_exists(holder) OR holder = :s"
    values: dict[str, Any] = {":s": _s(slot), ":ss": {"SS": [slot]}, ":now": _s(now.isoformat())}
    since = "if_not_exists(since, :now)"
    if replacing is not None:
        condition += " OR holder = :r"
        values[":r"] = _s(replacing)
        since = ":now"
    return Expression(
        update=f"SET since = {since}, holder = :s DELETE waiting :ss", condition=condition, values=values
    )


def wait_for_turn(slot: str) -> Expression:
    """Join the job's waiting set (a set: joining twice is joining once)."""
    return Expression(update="ADD waiting :ss", values={":ss": {"SS": [slot]}})


def hand_turn(slot: str, following: str, now: datetime) -> Expression:
    """The holder ``slot`` hands the turn to ``following``, which must still be waiting."""
    return Expression(
        update="SET holder = :n, since = :now DELETE waiting :ns",
        condition="holder = :s AND contains(waiting, :n)",
        values={":s": _s(slot), ":n": _s(following), ":ns": {"SS": [following]}, ":now": _s(now.isoformat())},
    )


def free_turn(slot: str) -> Expression:
    """The holder ``slot`` lets the turn go; a slot that started waiting meanwhile makes this
    fail, and gets the turn on the caller's next round."""
    return Expression(
        update="REMOVE holder, since",
        condition="holder = :s AND attribute_not_exists(waiting)",
        values={":s": _s(slot)},
    )


# ------------------------------------------------------------- schedule groups


def unchanged_group(expected_updated_at: str) -> Expression:
    """Replace a schedule group only if nobody changed it since it was read (``updated_at``)."""
    return Expression(condition="updated_at = :expected", values={":expected": _s(expected_updated_at)})


# ------------------------------------------------------------- alerts


def take_over_alert(sending: str, previous_owner: str, stale_before_ms: int) -> Expression:
    """Take over an alert still ``sending`` by ``previous_owner``, who claimed (or last renewed)
    it before ``stale_before_ms``: its worker died. One deliverer at a time per alert."""
    return Expression(
        condition="st = :sending AND #o = :prev AND claimed < :stale",
        names={"#o": "owner"},
        values={":sending": _s(sending), ":prev": _s(previous_owner), ":stale": _n(stale_before_ms)},
    )


def owned_alert(owner: str) -> Expression:
    """Write an alert's progress or result only while ``owner`` still holds it."""
    return Expression(condition="#o = :o", names={"#o": "owner"}, values={":o": _s(owner)})


def open_streak(slot: str, ttl_epoch_s: int) -> Expression:
    """Count a failure in the job's streak: the first failed slot stays, ``last`` is this one. A
    repeat of the latest failure (its after-effects run again after a lost worker) fails the
    condition and counts nothing."""
    return Expression(
        update="SET #f = if_not_exists(#f, :s), #l = :s, expires_at = :ttl ADD #n :one",
        condition="attribute_not_exists(#l) OR #l <> :s",
        names={"#f": "first", "#l": "last", "#n": "n"},
        values={":s": _s(slot), ":ttl": _n(ttl_epoch_s), ":one": _n(1)},
    )


def replace_streak(
    expected_first: str, expected_failures: int, new: tuple[str, int, str] | None
) -> Expression:
    """End the streak (``new`` None), or make it ``(first, failures, last)``, only while it is as
    it was read: the same first slot and no failure joined since (an update, not a delete: the
    workers' role deletes nothing). So a failure that joins while ``recovered`` is raised is
    never closed with the streak it did not belong to."""
    names = {"#f": "first", "#n": "n", "#l": "last"}
    values: dict[str, Any] = {":f": _s(expected_first)}
    if expected_failures:
        condition = "#f = :f AND #n = :n"
        values[":n"] = _n(expected_failures)
    else:  # a streak written before failures were counted
        condition = "#f = :f AND attribute_not_exists(#n)"
    if new is None:
        return Expression(update="REMOVE #f, #n, #l", condition=condition, names=names, values=values)
    values.update({":nf": _s(new[0]), ":nn": _n(new[1]), ":nl": _s(new[2])})
    return Expression(
        update="SET #f = :nf, #n = :nn, #l = :nl", condition=condition, names=names, values=values
    )


def send_throttled(now_ms: int, interval_s: int, resolves: bool = False) -> Expression:
    """A rule sends at ``now_ms`` only if it last sent at least ``interval_s`` before (and the
    count of those held back restarts); a ``resolves`` alert also when the rule is open (it sent an
    alert since its last resolving one: ``open``), which it closes. Any other alert opens it."""
    values = {":now": _n(now_ms), ":zero": _n(0), ":cut": _n(now_ms - interval_s * 1000)}
    if not resolves:
        return Expression(
            update="SET #l = :now, held = :zero, #o = :yes",
            condition="attribute_not_exists(#l) OR #l <= :cut",
            names={"#l": "last", "#o": "open"},
            values={**values, ":yes": {"BOOL": True}},
        )
    return Expression(
        update="SET #l = :now, held = :zero REMOVE #o",
        condition="attribute_not_exists(#l) OR #l <= :cut OR attribute_exists(#o)",
        names={"#l": "last", "#o": "open"},
        values=values,
    )


def hold_throttled() -> Expression:
    """Count one alert of a rule held back by its interval."""
    return Expression(update="ADD held :one", values={":one": _n(1)})


# ------------------------------------------------------------- backfills (calendars: .calendar_schema)


def backfill_key(tenant: str, job_id: str, backfill_id: str) -> Key:
    return _key(job_pk(tenant, job_id), f"backfill#{backfill_id}")


def job_as_read(version: int | None) -> Expression:
    """A job item still as it was read: absent (``version`` None) or at ``version``."""
    if version is None:
        return CREATE
    return Expression(condition="version = :v", values={":v": _n(version)})


def backfill_revision(revision: int) -> Expression:
    """Write a backfill record only over the one at ``revision``."""
    return Expression(condition="rev = :r", values={":r": _n(revision)})


# ------------------------------------------------------------- tenant quotas (issue 31)


def peaks_key(tenant: str) -> Key:
    return _key(tenant_pk(tenant), "#peaks")


def running_backfills_key(tenant: str) -> Key:
    return _key(tenant_pk(tenant), "#backfills")


def backfill_slots_key(tenant: str, window: str) -> Key:
    return _key(f"reqs#{tenant}", f"backfill#{window}")


def version_step(expected: int, attribute: str = "version", also: dict[str, Any] | None = None) -> Expression:
    """Move an item's ``attribute`` from ``expected`` (0: not there yet) on by one, setting the
    attributes ``also`` names beside it; fails when another write moved it first."""
    condition = f"attribute_not_exists({attribute})" if expected == 0 else f"{attribute} = :e"
    values: dict[str, Any] = {":v": _n(expected + 1)}
    if expected:
        values[":e"] = _n(expected)
    sets = [f"{attribute} = :v"]
    for n, (name, value) in enumerate((also or {}).items()):
        sets.append(f"{name} = :a{n}")
        values[f":a{n}"] = value
    return Expression(update="SET " + ", ".join(sets), condition=condition, values=values)


def put_peaks(doc: str, expected_version: int) -> Expression:
    """Write a tenant's peak profile over the one at ``expected_version`` (0: none yet)."""
    return version_step(expected_version, also={"doc": _s(doc)})


def join_backfills(member: str, limit: int) -> Expression:
    """Add ``member`` to the running set while it holds fewer than ``limit`` (or already holds it)."""
    return Expression(
        update="ADD running :m",
        condition="attribute_not_exists(running) OR size(running) < :limit OR contains(running, :s)",
        values={":m": {"SS": [member]}, ":s": _s(member), ":limit": _n(limit)},
    )


def leave_backfills(member: str) -> Expression:
    return Expression(update="DELETE running :m", values={":m": {"SS": [member]}})


def take_slots(want: int, limit: int, ttl_epoch_s: int) -> Expression:
    """Count ``want`` more slots in the window, refused unless they all fit under ``limit``."""
    return Expression(
        update="ADD n :want SET expires_at = if_not_exists(expires_at, :ttl)",
        condition="attribute_not_exists(n) OR n <= :room",
        values={":want": _n(want), ":room": _n(limit - want), ":ttl": _n(ttl_epoch_s)},
    )


# --------------------------------------------------------------------------- the job item


def job_doc(job: Job) -> str:
    """The job's stored document (its secrets are attributes of their own)."""
    return with_kept(job, stored_document(job))


def job_attributes(job: Job) -> dict[str, Any]:
    """The job item's attributes besides its key (what :mod:`punctual.store.dynamo.sizes` measures too)."""
    attrs = {
        "version": _n(job.version),
        "state": _s(job.state.value),
        "doc": _s(job_doc(job)),
    }
    if job.trigger_rate:
        attrs["tpm"] = _n(job.trigger_rate)
    if job.signing_secret_enc:
        attrs["secret"] = _s(job.signing_secret_enc)
    if job.signing_secret_prev_enc:
        attrs["secret_prev"] = _s(job.signing_secret_prev_enc)
    return attrs
