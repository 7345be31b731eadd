"""The dependency items' keys and expressions (the table's layout is in :mod:`.schema`): a child
slot's parents that succeeded (``dep#<slot>``, and whether it was dispatched), a parent's link to
each child (``child#<child>``, counted in the parent's ``dependents``), and the tenant's
dependency graph version (``#graph``), which a write that gives a job a new parent moves on
under a condition: two such writes checked for a cycle against the same graph cannot both land.
"""

from __future__ import annotations

from typing import Any

from punctual.store.dynamo.schema import Expression, Key, _key, _n, job_pk, tenant_pk, version_step

DEPENDENCY_PREFIX = "dep#"  # a child slot's parents that succeeded, and whether it was dispatched
CHILD_PREFIX = "child#"


def dependency_key(tenant: str, child_id: str, slot: str) -> Key:
    return _key(job_pk(tenant, child_id), f"{DEPENDENCY_PREFIX}{slot}")


def dependent_key(tenant: str, parent_id: str, child_id: str) -> Key:
    return _key(job_pk(tenant, parent_id), f"{CHILD_PREFIX}{child_id}")


def graph_key(tenant: str) -> Key:
    return _key(tenant_pk(tenant), "#graph")


def graph_version(item: dict[str, Any] | None) -> int:
    """The version a graph item holds (0: none yet)."""
    return int(item["v"]["N"]) if item and "v" in item else 0


def advance_graph(expected: int) -> Expression:
    """Move the tenant's dependency graph from ``expected`` (as read before the cycle check) on
    by one; fails when another write moved it meanwhile."""
    return version_step(expected, "v")


def record_parent(parent_id: str, ttl_epoch_s: int) -> Expression:
    """Add a parent's success to a child slot's set (a set: recording twice is once)."""
    return Expression(
        update="ADD parents :p SET expires_at = :ttl",
        values={":p": {"SS": [parent_id]}, ":ttl": _n(ttl_epoch_s)},
    )


def waiting_child_slot(item: dict[str, Any]) -> tuple[str, frozenset[str]] | None:
    """A dependency item's slot and the parents that succeeded for it; None once dispatched."""
    if "dispatched" in item:
        return None
    return item["sk"]["S"][len(DEPENDENCY_PREFIX) :], frozenset(item.get("parents", {}).get("SS", []))


def claim_child() -> Expression:
    """The one claim of a child slot's dispatch: the first writer wins, every later one fails."""
    return Expression(
        update="SET dispatched = :t",
        condition="attribute_not_exists(dispatched)",
        values={":t": {"BOOL": True}},
    )


def count_dependent(delta: int, version: int | None = None) -> Expression:
    """Change the parent job's dependant count, on a job that still exists (at ``version``, when
    given: the job a cycle check read, not one created again at its id since)."""
    if version is None:
        return Expression(
            update="ADD dependents :d", condition="attribute_exists(pk)", values={":d": _n(delta)}
        )
    return Expression(
        update="ADD dependents :d",
        condition="attribute_exists(pk) AND version = :v",
        values={":d": _n(delta), ":v": _n(version)},
    )
