"""Scenes for the stale-read and conflict tests: the real JobService, poller release and worker on
a store that is behind and contentious the way DynamoDB is, in memory or on moto.

* ``memory``: :class:`~punctual.store.memory.MemoryStore` with a
  :class:`~punctual.store.memory.fidelity.Fidelity`;
* ``dynamo``: :class:`~punctual.store.dynamo.DynamoStore` on in-process moto with
  :mod:`local.moto_fidelity` (the same simulation behind moto's DynamoDB API).

Both read their versions' instants from the scene's manual clock, so "one second behind" is one
second of the scenario. :meth:`Scene.conflict` scripts one conflict on a named item, spelled in
each store's terms.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from execution_harness import LAYOUT, LONG, SHORT, Rig
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.store.memory import MemoryStore
from punctual.store.memory.fidelity import Fidelity
from punctual.usecases.jobs import JobService, QueueRouting

TABLE = "punctual-fidelity"


class MaxLag(random.Random):
    """Randomness that reads exactly L behind (the top of each read's range)."""

    def uniform(self, a: float, b: float) -> float:
        return b


# Which item a scripted conflict meets, in each store's terms.
_MEMORY_ITEMS: dict[str, tuple[str | None, Callable[[Any], bool]]] = {
    "link": (None, lambda key: key[0] == "link"),
    "counter": (None, lambda key: key[0] == "meta"),
    "job": ("replace_job", lambda key: key[0] == "job"),
    "skipped": ("add_skipped", lambda key: key[0] == "job"),
}
_DYNAMO_ITEMS: dict[str, tuple[str | None, Callable[[Any], bool]]] = {
    "link": ("TransactWriteItems", lambda ref: ref.sk.startswith("child#")),
    "counter": ("TransactWriteItems", lambda ref: ref.sk == "#meta"),
    "job": ("TransactWriteItems", lambda ref: ref.sk == "job"),
    "skipped": ("UpdateItem", lambda ref: ref.sk == "job"),
}


@dataclass
class Scene:
    kind: str
    store: JobStore
    clock: ManualClock
    rig: Rig
    service: JobService
    fidelity: Any  # Fidelity (memory) or MotoFidelity (dynamo)

    def conflict(self, item: str, times: int = 1) -> None:
        """The next ``times`` writes of ``item`` (link, counter, job, skipped) meet a conflict."""
        operation, match = (_MEMORY_ITEMS if self.kind == "memory" else _DYNAMO_ITEMS)[item]
        self.fidelity.inject_conflict(operation, match, times)


def service_for(store: JobStore, rig: Rig) -> JobService:
    return JobService(store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))


@contextmanager
def scene(
    kind: str, t0: datetime, stale_read_s: float = 0.0, conflict_share: float = 0.0, rng: Any = None
) -> Iterator[Scene]:
    """A scene of ``kind`` (``memory`` or ``dynamo``) starting at ``t0``."""
    clock = ManualClock(t0)

    def seconds() -> float:
        return clock.now().timestamp()

    if kind == "memory":
        fidelity = Fidelity(stale_read_s, conflict_share, rng=rng or MaxLag(1), clock=seconds)
        store: JobStore = MemoryStore(fidelity=fidelity)
        rig = Rig(store, clock)
        yield Scene(kind, store, clock, rig, service_for(store, rig), fidelity)
        return
    import boto3
    from moto import mock_aws

    from local import moto_fidelity
    from punctual.runtime import composition
    from punctual.store.dynamo import DynamoStore, table_definition
    from punctual.store.dynamo.conflicts import ConflictRetryingClient

    composition.reset()
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(**table_definition(TABLE))
        simulated = moto_fidelity.MotoFidelity(
            stale_read_s, conflict_share, clock=seconds, rng=rng or MaxLag(1)
        )
        with moto_fidelity.installed(simulated):
            store = DynamoStore(ConflictRetryingClient(client, sleep=lambda _: None), TABLE)
            rig = Rig(store, clock)
            yield Scene(kind, store, clock, rig, service_for(store, rig), simulated)
    composition.reset()
