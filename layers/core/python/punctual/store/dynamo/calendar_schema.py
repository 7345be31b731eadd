"""The calendar items' keys and expressions (the table's layout is in :mod:`.schema`): a calendar's
item (version, doc, ``user_count``) and one item per job that excludes it (``caluse#<name>#<job>``),
so that the calendar's item never grows with its users."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from punctual.store.dynamo.schema import Expression, Key, _key, _n, _s, partition, tenant_pk

CALENDAR_PREFIX = "cal#"
CALENDAR_USE_PREFIX = "caluse#"  # caluse#<calendar>#<job id>: one item per use


def calendar_key(tenant: str, name: str) -> Key:
    return _key(tenant_pk(tenant), f"{CALENDAR_PREFIX}{name}")


def put_calendar(version: int, doc: str, expected_version: int | None) -> Expression:
    """Write a calendar's version and document, keeping its users: a create must find no item,
    a replace the item at ``expected_version``."""
    values: dict[str, Any] = {":v": _n(version), ":d": _s(doc)}
    condition = "attribute_not_exists(pk)"
    if expected_version is not None:
        condition = "version = :e"
        values[":e"] = _n(expected_version)
    return Expression(update="SET version = :v, doc = :d", condition=condition, values=values)


def create_counted_calendar(version: int, doc: str, users: int) -> Expression:
    """Create a calendar whose ``users`` jobs already name it (its item came back): it must find no item."""
    return Expression(
        update="SET version = :v, doc = :d, #n = :c",
        condition="attribute_not_exists(pk)",
        names={"#n": "user_count"},
        values={":v": _n(version), ":d": _s(doc), ":c": _n(users)},
    )


def one_calendar(tenant: str, name: str) -> Expression:
    """A Query of one calendar's item by its key (as the console's function reads a calendar)."""
    key = calendar_key(tenant, name)
    return Expression(key_condition="pk = :pk AND sk = :sk", values={":pk": key["pk"], ":sk": key["sk"]})


def calendar_use_keys(tenant: str, name: str) -> Expression:
    """A Query of the keys of a calendar's use items (the jobs that name it)."""
    return replace(partition(tenant_pk(tenant), calendar_uses_prefix(name)), projection="pk, sk")


def calendar_use_key(tenant: str, name: str, job_id: str) -> Key:
    """A job's use of a calendar: an item of its own (a calendar's item only counts its users)."""
    return _key(tenant_pk(tenant), f"{calendar_uses_prefix(name)}{job_id}")


def calendar_uses_prefix(name: str) -> str:
    """The sort-key prefix of a calendar's use items (a query of its users)."""
    return f"{CALENDAR_USE_PREFIX}{name}#"


def delete_calendar(expected_version: int | None) -> Expression:
    """Delete a calendar only while no job uses it (its count, and the set an earlier version kept
    on the item) and at ``expected_version``."""
    condition = (
        "attribute_exists(pk) AND (attribute_not_exists(#u) OR size(#u) = :zero)"
        " AND (attribute_not_exists(#n) OR #n <= :zero)"
    )
    values: dict[str, Any] = {":zero": _n(0)}
    if expected_version is not None:
        condition += " AND version = :e"
        values[":e"] = _n(expected_version)
    return Expression(condition=condition, names={"#u": "users", "#n": "user_count"}, values=values)


def delete_drifted_calendar(count: int, expected_version: int | None) -> Expression:
    """Delete a calendar whose count of users is ``count`` although no job uses it (a count left
    high by a race as it was brought back): only while the count is still that (a job adding a use
    moves it) and no set an earlier version kept names a job."""
    condition = "attribute_exists(pk) AND (attribute_not_exists(#u) OR size(#u) = :zero) AND #n = :c"
    values: dict[str, Any] = {":zero": _n(0), ":c": _n(count)}
    if expected_version is not None:
        condition += " AND version = :e"
        values[":e"] = _n(expected_version)
    return Expression(condition=condition, names={"#u": "users", "#n": "user_count"}, values=values)


def count_calendar_use(delta: int, job_id: str | None = None) -> Expression:
    """Count a use of a calendar that exists in or out (a job write's transaction carries it with
    the use's own item); ``job_id``: also take the job out of the set an earlier version kept."""
    if job_id is None:
        return Expression(
            update="ADD #n :d",
            condition="attribute_exists(pk)",
            names={"#n": "user_count"},
            values={":d": _n(delta)},
        )
    return Expression(
        update="ADD #n :d DELETE #u :j",
        condition="attribute_exists(pk)",
        names={"#n": "user_count", "#u": "users"},
        values={":d": _n(delta), ":j": {"SS": [job_id]}},
    )


def drop_legacy_calendar_use(job_id: str) -> Expression:
    """Take a job out of the users set an earlier version kept on a calendar's item."""
    return Expression(
        update="DELETE #u :j",
        condition="attribute_exists(pk)",
        names={"#u": "users"},
        values={":j": {"SS": [job_id]}},
    )
