"""Storing a job batch's new jobs a group at a time (``POST /v1/job-batches``, issue 32).

Each job stored alone is a transaction of four items (job, listing, its tenant's counter, first
timer): 8 write units, and a write of the counter item, which one item takes about 500 times a
second, per job. Here the batch's new jobs that have no ``after()`` parents and exclude no
calendar (each made by :func:`punctual.usecases.registration.prepare`: checked and built as a
single create does) are written in groups of up to 33 (the counter and each job's three items:
DynamoDB's 100 items a transaction, and within its 4 MB), each group one transaction with ONE
update of the counter (:mod:`punctual.store.job_groups`), and counted in their tenant's peak
profile in one profile write (:meth:`PeakQuota.change_each`, each job checked on its own): about
6 write units a job, the counter and the profile written once a group. As exact as one job at a
time:

* **Idempotent.** A job of the group that exists already cancels the whole transaction; the
  store names it (its item's cancellation reason), it is answered as a single create answers
  (``JobExistsError``: the batch says ``exists`` or ``conflict``), and the others are written
  again in a new transaction. A conflict with another transaction is retried by the store, a
  new request token a try, as every write is.
* **Quotas.** A job its tenant's peak quotas refuse is refused alone. A group that would take the
  tenant past ``maxJobsPerTenant`` (or its trigger rate quota) is written job by job, as a single
  create writes it, so the reply names exactly the jobs refused.
* **Nothing half stored.** A group is written whole or not at all, each job with its listing and
  first timer; a job not written has its peak count taken back. A group that fails for another
  reason (a conflict through every retry, storage unreachable) answers that error for each of
  its jobs; a repeat of the batch stores them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from punctual.security.peaks import job_profile
from punctual.store.base import JobExistsError, TenantLimitError
from punctual.store.dynamo.sizes import job_item_sizes
from punctual.store.job_groups import GROUP_MAX_BYTES, GROUP_MAX_ITEMS, JobGroupRepository
from punctual.store.outcomes import may_have_landed
from punctual.usecases.registration import Made, NewJob, Registrar, placed_now, refused_peaks, stored, write

Outcome = Made | Exception  # a job stored (and its secret), or why not
TIMER_BYTES = 1024  # a first timer's item, at most (keys, slot, due, kind, version: ~300 bytes)


def groups(news: Sequence[NewJob]) -> list[list[int]]:
    """The jobs (indexes) in groups that each fit one transaction: the counter's update and each
    job's items within :data:`GROUP_MAX_ITEMS` and :data:`GROUP_MAX_BYTES`."""
    out: list[list[int]] = []
    current: list[int] = []
    items, size = 1, 0  # the counter's update
    for n, new in enumerate(news):
        need = 2 + (new.timer is not None)
        nbytes = sum(job_item_sizes(new.job).values()) + TIMER_BYTES
        if current and (items + need > GROUP_MAX_ITEMS or size + nbytes > GROUP_MAX_BYTES):
            out.append(current)
            current, items, size = [], 1, 0
        current.append(n)
        items, size = items + need, size + nbytes
    return [*out, current] if current else out


def store_all(reg: Registrar, news: Sequence[NewJob]) -> list[Outcome]:
    """Store prepared jobs (one tenant's): the groupable ones a group at a time, the others each
    alone; an outcome per job, in order."""
    out: dict[int, Outcome] = {}
    grouped = isinstance(reg.store, JobGroupRepository)
    together = [n for n, new in enumerate(news) if new.groupable and grouped]
    for n in sorted(set(range(len(news))) - set(together)):
        out[n] = _alone(reg, news[n])
    for group in groups([news[n] for n in together]):
        _store_group(reg, news, _counted(reg, news, [together[n] for n in group], out), out)
    return [out[n] for n in range(len(news))]


def _counted(reg: Registrar, news: Sequence[NewJob], group: list[int], out: dict[int, Outcome]) -> list[int]:
    """The group's jobs counted in their tenant's peaks in one profile write, each checked on its
    own (:meth:`PeakQuota.change_each`); those refused are answered and left out."""
    peaks = reg.admission.peaks
    if peaks is None or not group:
        return group
    profiles = [job_profile(news[n].job) for n in group]
    try:
        errors = peaks.change_each(news[group[0]].job.tenant, profiles)
    except Exception as exc:  # the profile could not be read or written: none of them counted
        errors = [exc] * len(group)
    kept = []
    for n, profile, error in zip(group, profiles, errors, strict=True):
        if error is None:
            news[n].added = (profile, None)
            kept.append(n)
        else:
            out[n] = refused_peaks(reg, news[n], error) if isinstance(error, TenantLimitError) else error
    return kept


def _uncount(reg: Registrar, news: Sequence[NewJob], ns: Sequence[int]) -> None:
    """Take back the peaks counted of jobs not stored, in one profile write."""
    counted = [news[n].added[0] for n in ns if news[n].added[0] is not None]
    if counted:
        total = functools.reduce(lambda a, b: a.combined(b), counted[1:], counted[0])
        reg.admission.uncount_peaks(news[ns[0]].job.tenant, total, None)
    for n in ns:
        news[n].added = (None, None)


def _store_group(reg: Registrar, news: Sequence[NewJob], group: list[int], out: dict[int, Outcome]) -> None:
    store = reg.store
    assert isinstance(store, JobGroupRepository)
    pending = group
    while pending:
        try:
            taken = set(
                store.create_job_group(
                    [(news[n].job, placed_now(reg, news[n])) for n in pending],
                    reg.max_jobs,
                    reg.max_trigger_rate,
                )
            )
        except TenantLimitError:  # the group would pass a quota: job by job, each answered exactly
            for n in pending:
                out[n] = _alone(reg, news[n], counted=True)
            return
        except Exception as exc:  # nothing of the group was written (a conflict through every retry)
            if not may_have_landed(exc):  # (else it may have been: its counts are kept, never too low)
                _uncount(reg, news, pending)
            out.update(dict.fromkeys(pending, exc))
            return
        left = [n for n in pending if news[n].job.id not in taken]
        if not taken:
            out.update((n, _answered(reg, news[n])) for n in pending)
            return
        if len(left) == len(pending):  # the store named none of them: never loop on it
            _uncount(reg, news, left)
            out.update(
                dict.fromkeys(left, RuntimeError(f"a job group refused for jobs not in it: {sorted(taken)}"))
            )
            return
        refused = [n for n in pending if n not in left]
        _uncount(reg, news, refused)
        out.update((n, JobExistsError(f"job {news[n].job.id!r} already exists")) for n in refused)
        pending = left


def _answered(reg: Registrar, new: NewJob) -> Outcome:
    """A job of a group just stored, as answered (a failure here is its own, never the batch's)."""
    try:
        return stored(reg, new)
    except Exception as exc:
        return exc


def _alone(reg: Registrar, new: NewJob, counted: bool = False) -> Outcome:
    try:
        return write(reg, new, counted)
    except Exception as exc:
        return exc
