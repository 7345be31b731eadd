"""The errors of the job use cases: the API answers each with its own 4xx (a leaf module)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class JobError(Exception):
    """Base of the errors the API turns into 4xx answers."""


class JobNotFoundError(JobError):
    pass


class JobConflictError(JobError):
    """The job changed meanwhile (409), or is in a state that forbids the request."""


def listed(names: list[str], limit: int = 20) -> str:
    """``names`` for a message: the first ``limit``, then how many more."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


class JobHasDependentsError(JobConflictError):
    """A job that ``after(...)`` jobs name cannot be deleted (409): they would never fire again."""

    def __init__(self, job_id: str, children: list[str]) -> None:
        super().__init__(
            f"job {job_id!r} is a parent of after() jobs {listed(children)}: delete them or change their"
            " schedules first"
        )
        self.children = list(children)


class PreconditionFailedError(JobError):
    """``If-Match`` named a version that is not the current one (412)."""

    def __init__(self, message: str, current_version: int | None) -> None:
        super().__init__(message)
        self.current_version = current_version


class InvalidJobError(JobError):
    """The spec is well-formed but cannot be accepted (422): no future slot, a cycle, ..."""

    title = "Invalid job"  # the problem's title in the API's answer

    def __init__(self, message: str, field: str = "schedule") -> None:
        super().__init__(message)
        self.field = field


class InvalidBackfillError(InvalidJobError):
    """A backfill that cannot be accepted (422): its range, or a job that has no slots to backfill."""

    title = "Invalid backfill"


class ChangeMadeError(JobError):
    """The change was stored; a step after it (a read or a write it needs) failed: a 504, the
    change may be made, never a 503 that tells a client to send it again (review of QA29: a
    secret rotated twice, the receiver's secret dropped)."""


@contextmanager
def after_the_change(what: str) -> Iterator[None]:
    """Steps after a change's write: a failure is :class:`ChangeMadeError` (from it)."""
    try:
        yield
    except Exception as exc:
        raise ChangeMadeError(f"{what} was stored; a step after it failed ({type(exc).__name__})") from exc
