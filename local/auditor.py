"""The ``auditor`` component: the chain auditor's Lambda, invoked as its EventBridge rule would.

In the cloud a rule invokes ``functions/auditor/handler.py`` every minute with a scheduled event
whose ``time`` names the minute, and each invocation audits that minute's share of the segments
(``PUNCTUAL_AUDIT_PERIOD_MINUTES``). Here the period is one minute (every invocation audits every
job: local mode holds few) and the handler is invoked every ``audit_interval_s`` seconds, with the
same event shape and a stand-in Lambda context that counts down from the function's timeout. A
failed invocation is logged and the next one comes anyway, as Lambda's retries and the next
minute's rule do.
"""

from __future__ import annotations

import logging
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

from local.component import LambdaContext, load_handler, prepare
from local.config import REGION, LocalConfig

log = logging.getLogger("local.auditor")


def scheduled_event(now: datetime) -> dict[str, Any]:
    """EventBridge's scheduled event, as the rule sends it to the function."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/punctual-chain-audit"],
        "detail": {},
    }


def run(config: LocalConfig, stop: threading.Event) -> None:
    deployment = prepare(config, stop=stop)
    handler = load_handler("auditor").handler
    running: list[LambdaContext] = []

    def cut_on_stop() -> None:  # a stop cuts the invocation short: it ends between two segments
        stop.wait()
        for context in running:
            context.cut()

    threading.Thread(target=cut_on_stop, name="auditor-stop", daemon=True).start()
    while not stop.is_set():
        context = LambdaContext("punctual-auditor-local", timeout_s=deployment.auditor_timeout_s)
        running[:] = [context]
        if stop.is_set():
            context.cut()
        try:
            report = handler(scheduled_event(datetime.now(UTC)), context)
            if report.get("broken"):
                log.warning("chain audit: %s", report)
        except Exception:
            log.exception("the chain audit failed: the next one runs in %d s", config.audit_interval_s)
        stop.wait(config.audit_interval_s)
