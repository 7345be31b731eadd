"""Local mode retries its poller with the retriers the synthesised state machine has.

Local mode reads everything it deploys from the template (``local/template.py``), the poller
task's ``Retry`` included: the deployment carries it to the poller component
(``local/poller.py``) and to the supervisor, which restarts a dead poller process with the
same delays. ``test_state_machine_runs.py`` shows that moto's ASL interpreter waits exactly
those delays.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cdk_helpers import Synth, join_parts

from local.retriers import PROCESS_EXITED, error_name, retrier_for, retriers_from
from local.template import poller_retry, read_blueprint


def poller_tasks(synth: Synth) -> list[dict[str, Any]]:
    """The poller task of every Map of every minute state machine (the burst one: one per Map)."""
    tasks = []
    for machine in synth.of_type("AWS::StepFunctions::StateMachine").values():
        definition = json.loads(join_parts(machine["Properties"]["DefinitionString"]))
        groups = definition["States"][definition["States"][definition["StartAt"]]["Next"]]
        maps = (
            [b["States"][b["StartAt"]] for b in groups["Branches"]]
            if groups["Type"] == "Parallel"
            else [groups]
        )
        tasks += [m["ItemProcessor"]["States"][m["ItemProcessor"]["StartAt"]] for m in maps]
    return tasks


@pytest.mark.parametrize("variant", ["default", "burst"])
def test_local_mode_reads_the_poller_tasks_retry_from_the_template(
    variant: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(f"{variant}_synth")
    tasks = poller_tasks(synth)

    blueprint = read_blueprint(synth.json)

    assert all(task["Retry"] == tasks[0]["Retry"] for task in tasks)  # one per Map, on each machine
    assert blueprint.poller_retry == poller_retry(synth.json) == tasks[0]["Retry"]


def test_local_mode_retries_a_crash_and_restarts_a_dead_process_with_the_catch_all(
    default_synth: Synth,
) -> None:
    from punctual_cdk import constants as c

    retriers = retriers_from(read_blueprint(default_synth.json).poller_retry)

    # A handler that raised (local: the exception's type) and a dead process both meet the
    # catch-all, whose delays are the constants' schedule: 1, 1.5, then 2 s
    for error in (error_name(RuntimeError("boom")), PROCESS_EXITED):
        retrier = retrier_for(retriers, error)
        assert retrier is not None and retrier.errors == ("States.ALL",)
        assert retrier.delays_s() == [
            min(c.POLLER_RETRY_INTERVAL_S * c.POLLER_RETRY_BACKOFF_RATE**n, c.POLLER_RETRY_MAX_DELAY_S)
            for n in range(c.POLLER_RETRY_MAX_ATTEMPTS)
        ]
        assert retrier.delays_s()[:5] == [1, 1.5, 2, 2, 2]
