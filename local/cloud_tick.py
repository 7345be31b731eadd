"""The cloud's tick in local mode: every minute, two minutes ahead, re-planned, with the cloud's lead.

By default local mode plans a minute 40 s before its pollers start (``M - lead``) and runs the predictive
scaler every ``PERIOD_S`` seconds with a start lead of a few seconds: fast, but not the cadence
that decides whether a burst is prepared in time. With ``tick_cadence_s`` set (``--cloud-cadence``:
60), the poller process runs what the cloud runs instead:

* the real :class:`punctual.dispatch.tick.Tick`, at ``TICK_S`` into every ``tick_cadence_s``, which plans
  the coming minutes (``tick_lookahead_minutes``: two) and starts each one's "execution" here
  (:class:`LocalExecutions`: named, idempotent, re-planned ``<name>-r`` as Step Functions does),
  sizes the burst workers with the deployment's ``burstStartLeadS`` (75 s) and hold, and applies
  them through local mode's actuator (the supervisor starts ``burst-N`` worker processes);
* the minute's pollers start at ``M - lead`` with the plan of its running execution — the tick's,
  made two minutes ahead or re-planned a minute ahead — not a plan made on the spot.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from local.config import LocalConfig
from local.scaling import FileActuator, local_settings
from punctual.runtime.settings import Settings

log = logging.getLogger("local.cloud_tick")

TICK_S = 2.0  # EventBridge's every-minute rule fires in the first seconds (bench/capacity.py tick_s)


class LocalExecutions:
    """The minute state machine's executions, as the tick sees them through boto3's Step Functions."""

    class exceptions:
        class ExecutionAlreadyExists(Exception):
            pass

        class ExecutionDoesNotExist(Exception):
            pass

    def __init__(self, journal: Any = None) -> None:
        self._runs: dict[str, dict[str, Any]] = {}  # name -> {"input", "status"}
        self._lock = threading.Lock()
        self.journal = journal  # a Path: one JSON line per start and stop (tests read it)

    def start_execution(self, stateMachineArn: str, name: str, input: str) -> dict[str, Any]:
        with self._lock:
            if name in self._runs:
                raise self.exceptions.ExecutionAlreadyExists(name)
            self._runs[name] = {"input": input, "status": "RUNNING"}
        self._note({"started": name, "groups": len(json.loads(input).get("groups", []))})
        return {"executionArn": f"{stateMachineArn.replace(':stateMachine:', ':execution:')}:{name}"}

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        name = executionArn.rsplit(":", 1)[-1]
        with self._lock:
            run = self._runs.get(name)
        if run is None:
            raise self.exceptions.ExecutionDoesNotExist(name)
        return {"status": run["status"], "input": run["input"]}

    def stop_execution(self, executionArn: str, error: str = "", cause: str = "") -> dict[str, Any]:
        name = executionArn.rsplit(":", 1)[-1]
        with self._lock:
            if name in self._runs:
                self._runs[name]["status"] = "ABORTED"
        self._note({"stopped": name, "cause": cause})
        return {}

    def plan_for(self, name: str) -> dict[str, Any] | None:
        """The plan the minute ``name`` runs with: its re-planned execution's, else its first's."""
        with self._lock:
            for candidate in (name + "-r", name):
                run = self._runs.get(candidate)
                if run is not None and run["status"] == "RUNNING":
                    plan: dict[str, Any] = json.loads(run["input"])
                    return plan
        return None

    def _note(self, record: dict[str, Any]) -> None:
        if self.journal is None:
            return
        with self._lock, self.journal.open("a") as out:
            out.write(json.dumps(record) + "\n")


def cloud_settings(settings: Settings, config: LocalConfig) -> Settings:
    """Local mode's capacity profile (its worker processes) with the cloud's cadence and lead."""
    scaled = local_settings(settings, config)
    return scaled.model_copy(
        update={
            "burst_start_lead_s": settings.burst_start_lead_s,
            "burst_hold_s": settings.burst_hold_s,
            "scaling_period_s": float(config.tick_cadence_s),
            "state_machine_arn": settings.state_machine_arn
            or "arn:aws:states:local:000000000000:stateMachine:minutes",
        }
    )


class CloudTick:
    """Runs :class:`punctual.dispatch.tick.Tick` at the cloud's cadence in the poller process."""

    def __init__(self, config: LocalConfig, settings: Settings, store: Any, sqs: Any) -> None:
        from punctual.dispatch.tick import Tick

        self.config = config
        self.executions = LocalExecutions(config.run_dir / "executions.jsonl")
        actuator = FileActuator(config, sqs, list(settings.short_queue_urls))
        self.tick = Tick(cloud_settings(settings, config), self.executions, store, actuator)
        self.next_at: datetime | None = None

    def step(self, now: datetime) -> list[str] | None:
        """Tick if its time came (``TICK_S`` into each period); the executions it started."""
        if self.next_at is None:
            self.next_at = self._next(now - timedelta(seconds=self.config.tick_cadence_s))
        if now < self.next_at:
            return None
        self.next_at = self._next(now)
        started = self.tick.start_minutes(now)
        log.info("tick at %s: started %s", now.strftime("%H:%M:%S"), ", ".join(started) or "nothing new")
        return started

    def _next(self, now: datetime) -> datetime:
        period = timedelta(seconds=self.config.tick_cadence_s)
        base = now.replace(second=0, microsecond=0) + timedelta(seconds=TICK_S)
        while base <= now:
            base += period
        return base

    def plan(self, minute: datetime) -> dict[str, Any] | None:
        from punctual.dispatch.burst_sight import execution_name

        return self.executions.plan_for(execution_name(minute))
