"""Fairness between tenants when a release holds many slots: one tenant's burst cannot push
another tenant's slots back.

A release (everything the poller found due at once: a top-of-minute burst, a catch-up slice)
goes out in chunks, one after another, and each chunk's messages enter the shared queues in
order, where the workers take them first come first served. Left in key order, a tenant with
5,000 slots due at an instant fills the first fifty chunks, and another tenant's 20 slots at the
same instant wait behind them all. :func:`interleave_tenants` orders the release one slot per
tenant in turn (each tenant's own slots keep their order: due instant, then key), so the 20 go
out in the first chunk whatever the burst beside them.

It is a pure function of the timers, called at one place (:meth:`punctual.dispatch.polling.release.
SlotReleaser.release`), so it is tested alone and other release-order rules compose with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import zip_longest
from typing import TypeVar

from punctual.timing.timers import Timer

T = TypeVar("T", bound=Timer)


def interleave_tenants(timers: Sequence[T]) -> list[T]:
    """``timers`` one per tenant in turn, tenants in order of their first timer.

    Each tenant's timers keep their relative order. A release of one tenant (the usual case) is
    returned as it is.
    """
    by_tenant: dict[str, list[T]] = {}
    for timer in timers:
        by_tenant.setdefault(timer.tenant, []).append(timer)
    if len(by_tenant) <= 1:
        return list(timers)
    return [timer for turn in zip_longest(*by_tenant.values()) for timer in turn if timer is not None]


__all__ = ["interleave_tenants"]
