"""punctual-cdk: Punctual as CDK constructs.

* :class:`Punctual` — the whole scheduler in a stack of your own app;
* :class:`Job` — a job declared beside what it calls, with a typed target
  (:class:`LambdaTarget`, :class:`SqsTarget`, :class:`HttpTarget`, ...), validated at synth with
  the API's own rules, and registered by a CloudFormation custom resource (``Custom::PunctualJob``)
  whose provider acts as the declaring stack's own tenant;
* :class:`Calendar` — an exclusion calendar its stack's jobs name in ``exclude_calendars``
  (``Custom::PunctualCalendar``, the same provider and tenant).
"""

from __future__ import annotations

from punctual_cdk.calendars import Calendar, CalendarSpecError
from punctual_cdk.config import ConfigError, PunctualConfig
from punctual_cdk.jobs import Alert, Job, JobProvider, JobSpecError, SchedulerRef
from punctual_cdk.scheduler import Punctual
from punctual_cdk.targets import (
    EventBusTarget,
    HttpTarget,
    JobTarget,
    LambdaTarget,
    SnsTarget,
    SqsTarget,
    StateMachineTarget,
)

__version__ = "0.1.0"

__all__ = [
    "Alert",
    "Calendar",
    "CalendarSpecError",
    "ConfigError",
    "EventBusTarget",
    "HttpTarget",
    "Job",
    "JobProvider",
    "JobSpecError",
    "JobTarget",
    "LambdaTarget",
    "Punctual",
    "PunctualConfig",
    "SchedulerRef",
    "SnsTarget",
    "SqsTarget",
    "StateMachineTarget",
    "__version__",
]
