"""The keys and expressions of a tenant's runs in flight (:mod:`punctual.execution.inflight`), listed
with the other items in :mod:`.schema`."""

from __future__ import annotations

from punctual.store.dynamo.schema import Expression, Key, _key, _n


def in_flight_key(scope: str, window: int, shard: int) -> Key:
    """A counter of a lane and tenant's runs in flight in a window (:mod:`punctual.execution.inflight`)."""
    return _key(f"flight#{scope}#{window}#{shard}", "n")


def add_in_flight(delta: int, expires_at: int) -> Expression:
    """Add to a window's count of runs in flight (negative: take back)."""
    return Expression(
        update="ADD n :n SET expires_at = :exp", values={":n": _n(delta), ":exp": _n(expires_at)}
    )


def hot_in_flight_key(window: int) -> Key:
    """A window's list of the lanes and tenants near their cap of runs in flight."""
    return _key(f"flight#hot#{window}", "n")


def mark_hot_in_flight(scope: str, expires_at: int) -> Expression:
    """List a lane and tenant in a window's scopes near their cap."""
    return Expression(
        update="ADD s :s SET expires_at = :exp", values={":s": {"SS": [scope]}, ":exp": _n(expires_at)}
    )
