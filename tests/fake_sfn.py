"""Step Functions as the tick uses it, in memory: minutes' executions by name."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from punctual.dispatch.burst_sight import execution_name
from punctual.runtime.clock import ManualClock


class FakeSfn:
    """Standard executions by name: started, described, stopped."""

    class exceptions:
        class ExecutionAlreadyExists(Exception):
            pass

        class ExecutionDoesNotExist(Exception):
            pass

    def __init__(self) -> None:
        self.executions: dict[str, dict[str, Any]] = {}  # name -> {"input", "status", "at"}
        self.clock: ManualClock | None = None

    def start_execution(self, stateMachineArn: str, name: str, input: str) -> dict[str, Any]:
        if name in self.executions:
            raise self.exceptions.ExecutionAlreadyExists(name)
        self.executions[name] = {"input": json.loads(input), "status": "RUNNING", "raw": input}
        return {}

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        name = executionArn.rsplit(":", 1)[-1]
        if name not in self.executions:
            raise self.exceptions.ExecutionDoesNotExist(name)
        found = self.executions[name]
        return {"status": found["status"], "input": found["raw"]}

    def stop_execution(self, executionArn: str, error: str, cause: str) -> dict[str, Any]:
        self.executions[executionArn.rsplit(":", 1)[-1]]["status"] = "ABORTED"
        return {}

    def groups_of(self, minute: datetime) -> int:
        """The pollers ``minute`` runs with: its re-planned execution's, else its first one's."""
        for name in (execution_name(minute) + "-r", execution_name(minute)):
            found = self.executions.get(name)
            if found is not None and found["status"] == "RUNNING":
                return len(found["input"]["groups"])
        return 0
