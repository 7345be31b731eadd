"""Alerts: the rules a job carries (when to tell whom) and the alert records sent under them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from punctual.models.base import StrictModel, int_field
from punctual.models.executions import EARLIER_JOB_MARGIN
from punctual.models.targets import Target

MAX_ALERT_RULES = 10


class AlertCondition(StrEnum):
    """When an alert rule fires: the slot ended FAILED (or TIMED_OUT) after its last attempt, its first
    release came more than ``late_after_seconds`` after its instant, it was recorded MISSED, or it is
    the first success after one or more failed slots."""

    FAILED = "failed"
    LATE = "late"
    MISSED = "missed"
    RECOVERED = "recovered"


class AlertRule(StrictModel):
    """One alert rule of a job: which conditions, sent where, how often at most."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "on": ["failed", "recovered"],
                    "target": {"type": "http", "url": "https://hooks.example.com/a"},
                }
            ]
        },
    )

    on: list[AlertCondition] = Field(
        min_length=1,
        max_length=4,
        description="The conditions that send this alert: failed, late, missed, recovered.",
        examples=[["failed", "recovered"]],
    )
    target: Target = Field(
        description="Where the alert goes: any target type, with the same validation and guards as the job's."
    )
    late_after_seconds: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=86_400,
        description="`late`: a slot whose first release comes more than this many seconds after its instant.",
    )
    min_interval_seconds: int = int_field(
        0,
        "At most one alert of this rule per interval; the next says how many were held back (0: no limit).",
        ge=0,
        le=7 * 86_400,
    )
    format: Literal["json", "slack"] = Field(
        default="json",
        description='json: the alert document; slack: a Slack incoming-webhook message ({"text": summary}).',
    )

    @field_validator("on")
    @classmethod
    def _distinct(cls, value: list[AlertCondition]) -> list[AlertCondition]:
        if len(set(value)) != len(value):
            raise ValueError("on: a condition is listed twice")
        return value

    @model_validator(mode="after")
    def _late_bound(self) -> AlertRule:
        if AlertCondition.LATE in self.on and self.late_after_seconds is None:
            raise ValueError("a rule on 'late' needs late_after_seconds")
        if AlertCondition.LATE not in self.on and self.late_after_seconds is not None:
            raise ValueError("late_after_seconds is only for a rule on 'late'")
        return self


class AlertStatus(StrEnum):
    """An alert's delivery: SENDING (a worker delivers it now), SENT, FAILED (every try failed,
    the last error kept), HELD (held back by the rule's ``min_interval_seconds``)."""

    SENDING = "SENDING"
    SENT = "SENT"
    FAILED = "FAILED"
    HELD = "HELD"


class AlertDelivery(BaseModel):
    """What became of one rule's copy of an alert."""

    rule: int  # the rule's index in the job's ``alerts``
    status: AlertStatus
    tries: int = 0
    error: str | None = None
    held_back: int = 0  # alerts of this rule held back by min_interval_seconds before this one
    sent_at: AwareDatetime | None = None


class Alert(BaseModel):
    """One alert: at most one per (job, ``key_slot``, condition), made by a conditional write.

    ``key_slot`` is the slot the alert is about, except for ``recovered``, where it is the first
    failed slot of the streak that ended (so a streak recovers once); ``slot`` in ``body`` is
    always the slot that triggered it. ``owner`` and ``claimed_at`` say who delivers it; a
    delivery left SENDING longer than the stale bound is taken over (its worker died).
    """

    tenant: str
    job_id: str
    key_slot: str
    condition: AlertCondition
    status: AlertStatus = AlertStatus.SENDING
    created_at: AwareDatetime
    claimed_at: AwareDatetime
    owner: str
    body: dict[str, Any] = Field(default_factory=dict)
    deliveries: list[AlertDelivery] = Field(default_factory=list)
    rules: list[int] = Field(default_factory=list)  # the rules it goes to (a takeover delivers the rest)
    # Takeovers in a row that found no rule delivered since the claim before: a delivery cut short
    # each time (a worker's wait for it ran out, :data:`punctual.execution.batch.SETTLE_S`) is
    # given up after a few, not taken over for ever.
    stalled: int = 0
    delivered: int = 0  # rules delivered when it was last claimed (made or taken over)
    # The rules whose min_interval_seconds mark it took (before their tries), each with what the
    # mark counted held back before it: a takeover does not ask again (that mark would hold back
    # the very alert that made it, never delivered) and tells the same held_back
    passed_held: dict[int, int] = Field(default_factory=dict)
    # Takeovers so far: each owner numbers its tries after every earlier owner's (the fencing
    # token's number only grows, as a slot's attempts do)
    taken_over: int = 0

    def shown_as_an_earlier_jobs(self, created: datetime) -> bool:
        """Whether the API shows this alert as an earlier job's at the id of the job created at
        ``created`` (``job_deleted``): it was made before that creation, and more than
        :data:`~punctual.models.executions.EARLIER_JOB_MARGIN` before it or about a slot before it.
        ``created_at`` is the worker's clock and the creation the API's: an alert of the new job's
        first run (its slot at or after the creation, a run-now's instant is the API's) made by a
        worker whose clock is a second behind is the job's own (review of QA32, as for records)."""
        if self.created_at >= created:
            return False
        if self.created_at < created - EARLIER_JOB_MARGIN:
            return True
        scheduled = self.body.get("scheduled_at") or self.key_slot.split("~", 1)[0]  # (a run-now's mark)
        try:
            slot = datetime.fromisoformat(scheduled) if isinstance(scheduled, str) else None
        except ValueError:
            slot = None
        return slot is None or slot.tzinfo is None or slot < created
