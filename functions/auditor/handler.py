"""Auditor Lambda (EventBridge, every minute): check this minute's share of the jobs' chains.

Every decision lives in :mod:`punctual.auditing`: each ENABLED job is checked once per
``PUNCTUAL_AUDIT_PERIOD_MINUTES``; a broken chain is repaired from the job's next slot, the slots it
lost recorded as one MISSED record, and reported (``Chain Repaired`` event, ``ChainsBroken`` and
``ChainsRepaired`` metrics, the alarm on them). This parses the event, wires the core from the
``PUNCTUAL_*`` settings and stops before the invocation runs out of time (the segments left come
round again next period). ``{"enrol_segment": i, "enrol_segments": n}`` instead enrols the jobs of
one scan segment stored before the audit index (docs/operations.md, *Chain auditor*).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.runtime.composition import AuditEvent, container, run_auditor
from punctual.runtime.lambda_support import log_metrics, logger, tracer

STOP_BEFORE_TIMEOUT_MS = 20_000


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    request = AuditEvent.parse(event)
    if request.enrol_segment is not None:
        store = container().store
        enrolled = store.enrol_for_audit(request.enrol_segment, request.enrol_segments)
        return {"enrolled": enrolled, "segment": request.enrol_segment, "of": request.enrol_segments}
    report = run_auditor(
        request, stop=lambda: context.get_remaining_time_in_millis() < STOP_BEFORE_TIMEOUT_MS
    )
    logger.info("chain audit", extra=report)
    return report
