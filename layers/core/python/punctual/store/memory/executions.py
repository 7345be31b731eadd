"""Execution records and turns in memory."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from punctual.models import Execution, ExecutionStatus
from punctual.store.base import (
    ExecutionConflictError,
    ExecutionKey,
    ExecutionRepository,
    Expect,
    Page,
    Turn,
)
from punctual.store.listing import LIST_SCAN_BUDGET
from punctual.store.memory.base import MemoryBase


class MemoryExecutions(MemoryBase, ExecutionRepository):
    """Execution records and turns in memory."""

    # ---------------------------------------------------------------- turns

    def take_turn(
        self, tenant: str, job_id: str, slot: str, now: datetime, replacing: str | None = None
    ) -> Turn:
        with self._lock:
            turn = self._turns.get((tenant, job_id), Turn())
            if turn.holder in (None, slot) or (replacing is not None and turn.holder == replacing):
                since = turn.since if turn.holder == slot and replacing is None else now
                turn = Turn(slot, since, tuple(w for w in turn.waiting if w != slot))
                self._turns[(tenant, job_id)] = turn
            return turn

    def wait_for_turn(self, tenant: str, job_id: str, slot: str) -> None:
        with self._lock:
            turn = self._turns.get((tenant, job_id), Turn())
            self._turns[(tenant, job_id)] = Turn(
                turn.holder, turn.since, tuple(sorted({*turn.waiting, slot}))
            )

    def pass_turn(self, tenant: str, job_id: str, slot: str, now: datetime) -> str | None:
        with self._lock:
            turn = self._turns.get((tenant, job_id), Turn())
            if turn.holder != slot:
                return None
            if not turn.waiting:
                self._turns[(tenant, job_id)] = Turn()
                return None
            following, *rest = turn.waiting
            self._turns[(tenant, job_id)] = Turn(following, now, tuple(rest))
            return following

    # ---------------------------------------------------------------- executions

    def save_execution(self, execution: Execution, expect: Expect | None, ttl_epoch_s: int) -> None:
        with self._lock:
            key = (execution.tenant, execution.job_id, execution.slot)
            current = self._executions.get(key)
            if current is not None and current == execution and execution.owner is not None:
                return  # this very write, applied before (see JobStore.save_execution)
            if expect is None:
                if current is not None:
                    raise ExecutionConflictError("execution already exists", self._copy(current))
            elif not expect.matches(current):
                raise ExecutionConflictError(
                    "execution is not in the expected state",
                    self._copy(current) if current else None,
                )
            self._executions[key] = self._copy(execution)
            self._expires_at[key] = ttl_epoch_s

    def get_execution(
        self, tenant: str, job_id: str, slot: str, live_at: int | None = None
    ) -> Execution | None:
        with self._lock:
            execution = self._executions.get((tenant, job_id, slot))
            if execution is None or self._expired((tenant, job_id, slot), live_at):
                return None
            return self._copy(execution)

    def batch_get_executions(
        self, keys: Iterable[ExecutionKey], consistent: bool = True
    ) -> dict[ExecutionKey, Execution]:
        with self._lock:
            return {key: self._copy(self._executions[key]) for key in set(keys) if key in self._executions}

    def list_executions(
        self,
        tenant: str,
        job_id: str,
        limit: int,
        cursor: str | None = None,
        status: ExecutionStatus | None = None,
        newest_first: bool = True,
        live_at: int | None = None,
    ) -> Page[Execution]:
        with self._lock:
            slots = sorted(
                (s for t, j, s in self._executions if t == tenant and j == job_id), reverse=newest_first
            )
            if cursor is not None:
                slots = [s for s in slots if (s < cursor if newest_first else s > cursor)]
            items: list[Execution] = []
            last: str | None = None
            for examined, slot in enumerate(slots, 1):
                execution = self._executions[(tenant, job_id, slot)]
                last = slot
                if (status is None or execution.status == status) and not self._expired(
                    (tenant, job_id, slot), live_at
                ):
                    items.append(self._copy(execution))
                if len(items) == limit or (status is not None and examined >= LIST_SCAN_BUDGET):
                    break
            more = last is not None and last != slots[-1]
            return Page(items, last if more else None)
