"""Schedule routes: ``GET /v1/schedules/preview`` (an expression's next slots, as a job registered
now would see them) and ``GET /v1/jobs/{id}/upcoming`` (a stored job's own next slots, as its chain
will release them: Temporal's future action times). Added to the API by :func:`register`, as
:mod:`punctual.api.batch` adds its route."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from punctual.api import problems
from punctual.api.path_params import job_id_of
from punctual.api.schemas import JobUpcoming, SchedulePreview, UpcomingSlotOut
from punctual.models import CALENDAR_NAME_RE, CALENDAR_NAME_RULE, MAX_JOB_CALENDARS, Job, JobState
from punctual.timing.schedules import (
    AT_FIRES_ONCE,
    DstOptions,
    ScheduleError,
    check_new_expression,
    check_place,
    format_instant,
    parse_instant,
    parse_schedule,
    validate_timezone,
)
from punctual.timing.slots import schedule_of
from punctual.usecases.calendars import (
    MAX_SKIPPED_IN_A_ROW,
    Calendar,
    included_slots,
    preview_step,
    stopped_by_cap,
)
from punctual.usecases.next_fire import upcoming_releases, upcoming_slots

MAX_PREVIEW = 100
DEFAULT_UPCOMING = 10

JobIdParam = Annotated[
    str, Path(description="The job's id, as POST /v1/jobs answered it.", examples=["nightly-report"])
]


def register(app: Any, ok: Callable[..., Any], tenant_of_request: Callable[[], str]) -> None:
    """Add the schedule routes to the API (``ok`` builds their documented responses,
    ``tenant_of_request`` admits the caller as every route does)."""
    from punctual.api.wiring import services

    @app.get(  # type: ignore[untyped-decorator]
        "/v1/schedules/preview",
        summary="Preview a schedule's next slots",
        description=(
            "For UIs: the next `count` slots of an expression, as a job registered now would see them."
        ),
        responses=ok(200, "The next slots", SchedulePreview, 401, 422),
        tags=["schedules"],
        operation_id="previewSchedule",
    )
    def preview_schedule(
        expression: Annotated[
            str,
            Query(
                min_length=1,
                max_length=256,
                description="A schedule expression, as a job's schedule (not after(...)).",
                examples=["cron(0 9 ? * MON-FRI *)"],
            ),
        ],
        timezone: Annotated[
            str, Query(min_length=1, max_length=64, description="IANA time zone.", examples=["Europe/Berlin"])
        ] = "UTC",
        count: Annotated[int, Query(ge=1, le=MAX_PREVIEW, description="How many slots, 1-100.")] = 5,
        after: Annotated[str | None, Query(max_length=64, description="RFC 3339; default: now")] = None,
        dst_gap: Annotated[
            str | None,
            Query(max_length=16, description="As a job's `dst.gap`: `shift` (default) or `skip`."),
        ] = None,
        dst_repeat: Annotated[
            str | None,
            Query(max_length=16, description="As a job's `dst.repeat`: `first` (default) or `both`."),
        ] = None,
        calendars: Annotated[
            str | None,
            Query(
                max_length=700,
                description=(
                    "Comma-separated names of the caller's calendars: slots on their days are skipped."
                ),
                examples=["public-holidays"],
            ),
        ] = None,
        show_excluded: Annotated[
            bool, Query(description="With calendars: also list the slots passed over, as `excluded`.")
        ] = False,
    ) -> SchedulePreview:
        tenant = tenant_of_request()  # metered like every request (it computes up to 100 slots)
        try:
            validate_timezone(timezone)
            check_place(timezone)  # as a job's zone, and `punctual next --tz`: not localtime, posix/...
        except ScheduleError as exc:
            raise problems.invalid("query.timezone", str(exc)) from None
        try:
            start = parse_instant(after) if after is not None else services().jobs.clock.now()
        except ScheduleError as exc:
            raise problems.invalid("query.after", str(exc)) from None
        dst = _preview_dst(dst_gap, dst_repeat)
        try:
            check_new_expression(expression)  # as a job's schedule is checked
            schedule = parse_schedule(expression, timezone, dst, now=start)
        except ScheduleError as exc:
            raise problems.invalid("query.expression", str(exc)) from None
        if schedule.kind == "at" and dst_repeat == "both":  # as a job of it is refused
            raise problems.invalid("query.dst_repeat", AT_FIRES_ONCE)
        if schedule.kind == "after":
            raise problems.invalid(
                "query.expression", "after(...) has no time slots: it fires when its parents succeed"
            )
        if schedule.next_after(start, None) is None:  # an at() past, a rate() first due after 2199
            raise problems.invalid(
                "query.expression", f"{schedule.compared()} has no slot after {format_instant(start)}"
            )
        if not calendars:
            return SchedulePreview(
                expression=expression, timezone=timezone, slots=schedule.slots(start, None, count)
            )
        excluding = _preview_calendars(tenant, calendars)
        passed: list[Any] = []  # listed one by one only when asked for: else a day run passed at once
        listing = passed if show_excluded else None
        if schedule.kind == "delay":
            count = 1  # its first slot only, as without calendars (its next ones follow its runs)
        slots = included_slots(preview_step(schedule, start), start, excluding, count, listing)
        if len(slots) < count and stopped_by_cap(slots, passed):
            raise problems.invalid(
                "query.calendars", f"the calendars exclude more than {MAX_SKIPPED_IN_A_ROW} slots in a row"
            )
        if slots:
            passed = [slot for slot in passed if slot < slots[-1]]
        return SchedulePreview(
            expression=expression,
            timezone=timezone,
            slots=slots,
            excluded=passed if show_excluded else None,
        )

    @app.get(  # type: ignore[untyped-decorator]
        "/v1/jobs/<job_id>/upcoming",
        summary="A job's next slots",
        description=(
            "The next `count` slots the job releases, as it is now: its schedule from its anchor, its "
            "start_at and end_at, time zone and DST options, its jitter (fires_at) and the calendars it "
            "excludes. None for a job that is not ENABLED, an after() job (it runs when its parents "
            "succeed) or a delay() job (its next run counts from its last run's end): `note` says why."
        ),
        responses=ok(200, "The next slots", JobUpcoming, 401, 404, 409, 422),
        tags=["jobs"],
        operation_id="getJobUpcoming",
    )
    def job_upcoming(
        job_id: JobIdParam,
        count: Annotated[
            int, Query(ge=1, le=MAX_PREVIEW, description="How many slots, 1-100.")
        ] = DEFAULT_UPCOMING,
    ) -> JobUpcoming:
        tenant = tenant_of_request()
        jobs = services().jobs
        job = jobs.get(tenant, job_id_of(job_id))  # 404 when it is not the caller's, 409 unreadable
        kind = schedule_of(job).kind
        note = None
        slots: list[UpcomingSlotOut] = []
        if job.state is not JobState.ENABLED:
            note = f"the job is {job.state.value}: only an ENABLED job releases slots"
        elif kind == "after":
            note = "an after() job runs when its parents succeed: it has no slots of its own"
        elif kind == "delay":
            # (QA23: it said "see next_fire_at", which is null for a delay() job)
            note = "a delay() job's next run counts from its last run's end: it has no slots ahead of time"
        else:
            now, calendars = jobs.clock.now(), jobs.next_fire.excluded_by(job)
            found = upcoming_releases(job, now, calendars, count)
            slots = [UpcomingSlotOut(slot=slot, fires_at=at) for slot, at in found]
            note = None if slots else _none_left(job, now, calendars)
        return JobUpcoming(job_id=job.id, state=job.state.value, slots=slots, note=note)

    def _preview_dst(gap: str | None, repeat: str | None) -> DstOptions | None:
        """The preview's ``dst_gap`` and ``dst_repeat``, checked as a job's ``dst`` is (422 naming the
        parameter); None when neither is given."""
        for name, options in (("dst_gap", {"gap": gap}), ("dst_repeat", {"repeat": repeat})):
            try:
                DstOptions(**options)  # type: ignore[arg-type]
            except ScheduleError as exc:
                raise problems.invalid(f"query.{name}", str(exc)) from None
        return DstOptions(gap=gap, repeat=repeat) if gap or repeat else None  # type: ignore[arg-type]

    def _preview_calendars(tenant: str, text: str) -> list[Any]:
        """The caller's calendars named in ``text`` (comma-separated); 422 naming one missing or malformed."""
        names = [name.strip() for name in text.split(",") if name.strip()]
        if len(names) > MAX_JOB_CALENDARS:
            raise problems.invalid("query.calendars", f"at most {MAX_JOB_CALENDARS} calendars")
        for name in names:
            if not CALENDAR_NAME_RE.fullmatch(name):
                raise problems.invalid(
                    "query.calendars", f"calendar name {name[:80]!r}: {CALENDAR_NAME_RULE}"
                )
        found = services().store.batch_get_calendars(((tenant, name) for name in names), consistent=True)
        missing = [name for name in names if (tenant, name) not in found]
        if missing:
            raise problems.invalid("query.calendars", f"calendar {missing[0]!r} does not exist")
        return [found[(tenant, name)] for name in names]


def _none_left(job: Job, now: datetime, calendars: list[Calendar]) -> str:
    """Why an ENABLED job lists no slot: none is left, or (QA22: said to be none left) every one
    left is on a day of the calendars it excludes."""
    if calendars and upcoming_slots(job, now, (), 1):
        names = ", ".join(repr(calendar.name) for calendar in calendars)
        return f"every slot it has left is on a day its calendars exclude ({names}): none runs"
    return "no slot is left: its end_at passed, or its one slot did"
