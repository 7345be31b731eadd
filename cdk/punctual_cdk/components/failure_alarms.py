"""The alarms on failures that were counted and that no alarm heard (QA24), for :class:`Observability`.

Each is ``≥ 1`` in a five-minute window (``FAILURE_ALARM_S``), missing data not breaching (a count
is written only when there is something to count), alarm and OK to the topic:

* ``LeasesLost``, ``AlertsFailed``, ``ChildRecordsFailed``, ``RateBudgetStoreErrors`` and
  ``EventCopiesFailed`` + ``EventCopiesRefused``: each summed over both services that write it,
  ``punctual`` (Powertools: the Lambda workers, and the pollers for ``ChildRecordsFailed`` and
  ``RateBudgetStoreErrors``) and ``punctual-ecs-worker`` (the ECS workers);
* ``ApiFailures``: the API's own failures, exactly: its handler's count of 500 answers and of the
  503 ``misconfigured`` (``punctual.api.problems.failed_here``), plus the function's ``Errors``
  (a crash or a time-out, answered 502/504 by API Gateway without the handler counting). Not
  the deliberate 503 ``busy`` (storage throttling or unreached: nothing done, the client retries)
  nor the 504 ``storage-timeout``, which ``Api5xx`` and API Gateway's ``5XXError`` count too;
* ``ApiThrottled``: the api function's ``Throttles``: its reserved concurrency
  (``apiReservedConcurrency``) was full, and API Gateway answered those requests 500 itself (the
  handler never ran, so ``ApiFailures`` does not count them);
* ``PollersThrottled``: the poller functions' (standard + lean) ``Throttles``. A minute's poller
  that cannot be invoked is retried, then caught so the other groups run: that group's jobs stop
  while the others fire, and ``NoPollerInvoked`` (every poller silent) never hears it. A throttle
  its retry got past (a second or two) alarms too: the pollers' concurrency is short.
"""

from __future__ import annotations

from collections.abc import Callable

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch

from punctual_cdk import constants as c
from punctual_cdk.components.functions import PunctualFunction
from punctual_cdk.components.metrics import app_metric, lanes_sum

FAILURE_WINDOW = cdk.Duration.seconds(c.FAILURE_ALARM_S)

# (alarm, metrics summed, label, description)
_COUNTS: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    (
        "LeasesLost",
        (c.METRIC_LEASES_LOST,),
        "leases lost",
        "A worker lost the lease of a running attempt (a heartbeat found it taken over, or the"
        " store failed until it would lapse): the run was stopped mid-call and another worker takes"
        " the slot over, so its target may have been called twice. The worker's log names the slot;"
        " look for a worker starved of CPU or a failing table.",
    ),
    (
        "AlertsFailed",
        (c.METRIC_ALERTS_FAILED,),
        "alerts failed",
        "A job's alert rule could not be delivered (its webhook or AWS target failed through its"
        " tries): the tenant was not told of the failure or missed slot it alerts on. GET"
        " /v1/jobs/{id}/alerts shows the rule's last error; the worker's log names it.",
    ),
    (
        "ChildRecordsFailed",
        (c.METRIC_CHILD_RECORDS_FAILED,),
        "after() children's records not written",
        "The after() children's slots under a parent slot that was not run (MISSED, EXCLUDED or"
        " superseded) could not be recorded (the poller's or worker's log names the parent): a"
        " child's unrun slot is left without a record, its event and missed alert.",
    ),
    (
        "RateBudgetStoreErrors",
        (c.METRIC_RATE_BUDGET_STORE_ERRORS,),
        "rate budget store errors",
        "Rate budget instants could not be reserved in the table: the slots were placed by each"
        " process alone, so two pollers or workers may call a budgeted target on one instant (the"
        " budget is not kept). A lone one after a throttle is that throttle (TableThrottled); the"
        " log names the error.",
    ),
    (
        "EventCopiesNotDelivered",
        (c.METRIC_EVENT_COPIES_FAILED, c.METRIC_EVENT_COPIES_REFUSED),
        "event copies failed or refused",
        "A tenant's copy of its jobs' events was not put on the bus its job names (events_bus):"
        " PutEvents failed or its role could not be assumed (EventCopiesFailed), or the tenant"
        " boundary refused the bus (EventCopiesRefused). Its rules missed them; the worker's log"
        " names the job.",
    ),
)


def failure_alarms(
    alarm: Callable[..., cloudwatch.Alarm],
    api: PunctualFunction,
    pollers: Callable[[str, cdk.Duration, str], cloudwatch.IMetric],
) -> None:
    """Make the alarms of the module with ``alarm`` (:meth:`Observability._alarm`); ``pollers``
    sums a Lambda metric of the poller functions."""
    for name, metrics, label, description in _COUNTS:
        alarm(name, metric=lanes_sum(metrics, label, FAILURE_WINDOW), threshold=1, description=description)
    alarm(
        "ApiFailures",
        metric=cloudwatch.MathExpression(
            expression="FILL(answered, 0) + FILL(crashed, 0)",
            using_metrics={
                "answered": app_metric(c.METRIC_API_FAILURES, "Sum").with_(period=FAILURE_WINDOW),
                "crashed": api.function.metric_errors(period=FAILURE_WINDOW, statistic="Sum"),
            },
            label="API failures (500, 503 misconfigured, function errors)",
            period=FAILURE_WINDOW,
        ),
        threshold=1,
        description="The API failed a request itself: answered 500 (a bug or an AWS error, logged with"
        " its traceback), 503 'misconfigured' (the shard counts differ from the table's: nothing is"
        " written until fixed), or the function crashed or timed out (API Gateway answered 502/504)."
        " Not the 503 'busy' of a throttled or unreached table. The api function's log names it.",
    )
    alarm(
        "ApiThrottled",
        metric=api.function.metric_throttles(period=FAILURE_WINDOW, statistic="Sum", label="API throttles"),
        threshold=1,
        description="The api function was throttled: its reserved concurrency (apiReservedConcurrency)"
        " was full, and API Gateway answered those requests 500 Internal server error without the"
        " handler running (the client retries those it may repeat: reads, creates, run-nows)."
        " Raise apiReservedConcurrency (with"
        " apiThrottleRatePerS: it needs about the stage's requests a second x their seconds), or"
        " find the slow requests in the api function's log.",
    )
    alarm(
        "PollersThrottled",
        metric=pollers("Throttles", FAILURE_WINDOW, "poller throttles"),
        threshold=1,
        description="A poller invocation was throttled (reserved or account concurrency exhausted). It"
        " is retried at once, but a group whose poller cannot be invoked at all is caught so the other"
        " groups run: its jobs stop while the rest fire, and NoPollerInvoked does not hear it. Raise"
        " pollerReservedConcurrency or the account's concurrency; the minute's execution history"
        " names the group.",
    )
