"""The tick and the per-minute state machine: Wait, then one poller per shard group, logged and traced."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cdk_helpers import Synth, join_parts


def _machine(synth: Synth, machine: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    resource = synth.resources[synth.logical_id(machine or synth.stack.dispatch.state_machine)]
    definition = json.loads(join_parts(resource["Properties"]["DefinitionString"]))
    return resource["Properties"], definition


def test_state_machine_is_standard_logged_all_and_traced(any_synth: Synth) -> None:
    props, _ = _machine(any_synth)
    log_group = any_synth.logical_id(
        any_synth.stack.dispatch.state_machine.node.scope.node.find_child("StateMachineLogs")
    )

    assert props["StateMachineType"] == "STANDARD"  # names are idempotent for 90 days
    assert props["LoggingConfiguration"]["Level"] == "ALL"
    assert props["LoggingConfiguration"]["Destinations"] == [
        {"CloudWatchLogsLogGroup": {"LogGroupArn": {"Fn::GetAtt": [log_group, "Arn"]}}}
    ]
    assert props["TracingConfiguration"] == {"Enabled": True}


def test_waits_for_start_at_then_maps_groups_to_the_poller(any_synth: Synth) -> None:
    # Every shape's every-minute machine is the single Map (more than 40 groups: a second machine)
    _, definition = _machine(any_synth)
    poller = any_synth.logical_id(any_synth.stack.dispatch.poller.function)

    wait = definition["States"][definition["StartAt"]]
    assert wait["Type"] == "Wait"
    assert wait["TimestampPath"] == "$.start_at"
    groups = definition["States"][wait["Next"]]
    assert groups["Type"] == "Map"
    assert (
        groups["ItemsPath"] == "$.pollers"
    )  # each group once per replica (punctual.dispatch.tick.replicas_for)
    assert groups.get("MaxConcurrency", 0) == any_synth.stack.config.poller_max_concurrency
    assert groups["End"] is True

    # Each iteration gets its group's item and the function the tick chose for the minute.
    assert groups["ItemSelector"] == {"item.$": "$$.Map.Item.Value", "function.$": "$.poller_function"}

    processor = groups["ItemProcessor"]
    task = processor["States"][processor["StartAt"]]
    assert task["Type"] == "Task"
    assert task["Resource"] == "arn:<AWS::Partition>:states:::lambda:invoke"
    assert task["Parameters"] == {"FunctionName.$": "$.function", "Payload.$": "$.item"}  # the item itself
    # The tick names the standard poller by its ARN (and the lean one when it is deployed).
    tick = any_synth.resources[any_synth.logical_id(any_synth.stack.dispatch.tick.function)]
    variables = tick["Properties"]["Environment"]["Variables"]
    assert variables["PUNCTUAL_POLLER_FUNCTION"] == {"Fn::GetAtt": [poller, "Arn"]}


SERVICE_ERRORS = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
}


def retry_delays_s(retrier: dict[str, Any]) -> list[float]:
    """The waits of a retrier without jitter, as Step Functions computes them."""
    interval, rate = retrier.get("IntervalSeconds", 1), retrier.get("BackoffRate", 2.0)
    cap = retrier.get("MaxDelaySeconds", float("inf"))
    return [min(interval * rate**n, cap) for n in range(retrier.get("MaxAttempts", 3))]


def assert_retried_on_every_failure_then_isolated(task: dict[str, Any], states: dict[str, Any]) -> None:
    from punctual_cdk import constants as c

    service, catch_all = task["Retry"]
    # Lambda service errors and throttling first, jittered so a throttled Map does not retry in step
    assert set(service["ErrorEquals"]) == SERVICE_ERRORS
    assert service["JitterStrategy"] == "FULL"
    # ... then everything else: a handler that raised, a timeout, out of memory, Lambda.Unknown,
    # States.TaskFailed, States.Timeout. States.ALL must be alone and in the last retrier.
    assert catch_all["ErrorEquals"] == ["States.ALL"]
    assert catch_all.get("JitterStrategy", "NONE") == "NONE"
    for retrier in (service, catch_all):
        # Short backoff: the first retry after a second, none ever more than a few seconds apart
        assert retrier["IntervalSeconds"] == 1 and 1 < retrier["BackoffRate"] <= 2
        assert retrier["MaxDelaySeconds"] <= 5
    # Enough attempts to cover the poller's whole window even if every attempt failed at once
    assert sum(retry_delays_s(catch_all)) >= c.POLLER_WINDOW_S
    assert sum(retry_delays_s(service)) / 2 >= c.POLLER_WINDOW_S  # full jitter: half on average
    # Only a poller that still fails is caught, so the Map does not stop the other groups' pollers.
    (catch,) = task["Catch"]
    assert catch["ErrorEquals"] == ["States.ALL"]
    assert states[catch["Next"]]["Type"] == "Pass"


def test_poller_is_retried_on_every_failure_and_isolated_when_it_still_fails(default_synth: Synth) -> None:
    _, definition = _machine(default_synth)
    processor = definition["States"]["PollGroups"]["ItemProcessor"]
    task = processor["States"][processor["StartAt"]]

    assert_retried_on_every_failure_then_isolated(task, processor["States"])
    service, catch_all = task["Retry"]
    # The schedule chosen: 1, 1.5, then 2 s; 47 catch-all retries (92.5 s)
    assert retry_delays_s(catch_all)[:6] == [1, 1.5, 2, 2, 2, 2]
    assert (catch_all["MaxAttempts"], service["MaxAttempts"]) == (47, 94)


def test_the_execution_outlasts_a_poller_that_is_retried_through_its_window(default_synth: Synth) -> None:
    from punctual_cdk import constants as c

    props, definition = _machine(default_synth)
    processor = definition["States"]["PollGroups"]["ItemProcessor"]
    _, catch_all = processor["States"][processor["StartAt"]]["Retry"]
    poller = default_synth.resources[default_synth.logical_id(default_synth.stack.dispatch.poller.function)]

    # The lookahead wait, a first attempt to its Lambda timeout, every catch-all delay, and one more
    # attempt to its timeout: the execution's timeout cuts only a poller that keeps timing out.
    timeout_s = poller["Properties"]["Timeout"]
    longest = c.TICK_LOOKAHEAD_MINUTES * 60 + timeout_s + sum(retry_delays_s(catch_all)) + timeout_s
    assert definition["TimeoutSeconds"] == c.STATE_MACHINE_TIMEOUT_S >= longest
    assert "TimeoutSeconds" not in processor["States"][processor["StartAt"]]  # no per-attempt cut
    assert props["StateMachineType"] == "STANDARD"


def test_a_longer_poller_lead_is_retried_through_its_longer_window(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """QA27: the retriers were sized for the default lead's window (10 + 60 + 10 s): with
    pollerLeadS 50 a poller owns 120 s, and one that failed at every attempt from its start was
    caught 92.5 s in, its group's last half-minute left to the next minute's catch-up."""
    from cdk_helpers import synthesise

    from punctual_cdk import constants as c

    synth = synthesise(tmp_path_factory.mktemp("cdk-long-lead"), {"pollerLeadS": 50})
    _, definition = _machine(synth)
    processor = definition["States"]["PollGroups"]["ItemProcessor"]
    task = processor["States"][processor["StartAt"]]
    service, catch_all = task["Retry"]
    window_s = 50 + 60 + c.POLLER_GRACE_S
    assert sum(retry_delays_s(catch_all)) >= window_s
    assert sum(retry_delays_s(service)) / 2 >= window_s  # full jitter: half on average
    # ... and the execution still outlasts a poller retried through it
    poller = synth.resources[synth.logical_id(synth.stack.dispatch.poller.function)]
    timeout_s = poller["Properties"]["Timeout"]
    longest = c.TICK_LOOKAHEAD_MINUTES * 60 + timeout_s + sum(retry_delays_s(catch_all)) + timeout_s
    assert definition["TimeoutSeconds"] >= longest


def test_state_machine_role_invokes_only_the_two_pollers(default_synth: Synth) -> None:
    from cdk_helpers import actions_on, role_statements

    granted = actions_on(role_statements(default_synth, default_synth.stack.dispatch.state_machine.role))
    poller = default_synth.logical_id(default_synth.stack.dispatch.poller.function)
    assert default_synth.stack.dispatch.lean_poller is not None
    lean = default_synth.logical_id(default_synth.stack.dispatch.lean_poller.function)

    # The task's function comes from the input, so IAM is what bounds it: these two only.
    assert granted["lambda:InvokeFunction"] == {
        f"<{poller}.Arn>",
        f"<{poller}.Arn>:*",
        f"<{lean}.Arn>",
        f"<{lean}.Arn>:*",
    }


def test_lean_poller_is_the_same_code_at_small_memory(default_synth: Synth) -> None:
    dispatch = default_synth.stack.dispatch
    assert dispatch.lean_poller is not None
    standard = default_synth.resources[default_synth.logical_id(dispatch.poller.function)]["Properties"]
    lean = default_synth.resources[default_synth.logical_id(dispatch.lean_poller.function)]["Properties"]

    assert standard["MemorySize"] == 1024
    assert lean["MemorySize"] == 128  # an idle minute's poller: ~$6 a month instead of ~$47
    for key in ("Code", "Handler", "Runtime", "Architectures", "Timeout", "Layers", "Environment"):
        assert lean[key] == standard[key], key
    tick = default_synth.resources[default_synth.logical_id(dispatch.tick.function)]
    variables = tick["Properties"]["Environment"]["Variables"]
    lean_id = default_synth.logical_id(dispatch.lean_poller.function)
    assert variables["PUNCTUAL_LEAN_POLLER_FUNCTION"] == {"Fn::GetAtt": [lean_id, "Arn"]}
    assert variables["PUNCTUAL_LEAN_MAX_TRIGGERS_PER_MINUTE"] == "60"


def test_the_lean_poller_reserves_only_what_a_lean_minute_runs(
    custom_synth: Synth, default_synth: Synth
) -> None:
    """QA22: pollerReservedConcurrency was reserved on both pollers, so the lean one, which runs one
    poller a minute, held as much of the account's concurrency as the standard one (2 x R in all)."""
    from punctual.dispatch.tick import LEAN, replicas_for
    from punctual.runtime.settings import Settings

    def reserved(synth: Synth, poller: Any) -> Any:
        return synth.resources[synth.logical_id(poller.function)]["Properties"].get(
            "ReservedConcurrentExecutions"
        )

    dispatch = custom_synth.stack.dispatch
    assert dispatch.lean_poller is not None
    assert reserved(custom_synth, dispatch.poller) == 80
    # a lean minute's one group runs one poller; two minutes' pollers overlap
    lean_minute_pollers = replicas_for(1, LEAN, Settings())
    assert reserved(custom_synth, dispatch.lean_poller) == 2 * lean_minute_pollers == 2
    # no reservation asked, none made
    assert default_synth.stack.dispatch.lean_poller is not None
    assert reserved(default_synth, default_synth.stack.dispatch.lean_poller) is None
    assert reserved(default_synth, default_synth.stack.dispatch.poller) is None


def test_lean_poller_can_be_turned_off(tmp_path_factory: pytest.TempPathFactory) -> None:
    from cdk_helpers import synthesise

    synth = synthesise(tmp_path_factory.mktemp("cdk-no-lean"), {"leanPollerMaxTriggersPerMinute": 0})
    assert synth.stack.dispatch.lean_poller is None
    tick = synth.resources[synth.logical_id(synth.stack.dispatch.tick.function)]
    assert tick["Properties"]["Environment"]["Variables"]["PUNCTUAL_LEAN_POLLER_FUNCTION"] == ""


def test_every_minute_the_rule_invokes_the_tick(default_synth: Synth) -> None:
    tick = default_synth.logical_id(default_synth.stack.dispatch.tick.function)
    (rule,) = [  # (the other rule every minute is the chain auditor's: tests/infra/test_infra_auditor.py)
        r
        for r in default_synth.of_type("AWS::Events::Rule").values()
        if r["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": [tick, "Arn"]}
    ]

    assert rule["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    assert rule["Properties"]["State"] == "ENABLED"
    (target,) = rule["Properties"]["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [tick, "Arn"]}
    # A stale tick is useless (a newer one covers its minutes): bounded age and retries.
    assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] <= 300
    default_synth.template.has_resource_properties(
        "AWS::Lambda::Permission",
        {
            "Action": "lambda:InvokeFunction",
            "Principal": "events.amazonaws.com",
            "FunctionName": {"Fn::GetAtt": [tick, "Arn"]},
        },
    )


def test_shard_groups_from_context_reach_the_tick(custom_synth: Synth) -> None:
    tick = custom_synth.resources[custom_synth.logical_id(custom_synth.stack.dispatch.tick.function)]

    variables = tick["Properties"]["Environment"]["Variables"]
    assert variables["PUNCTUAL_SHARD_GROUPS"] == "4"
    assert variables["PUNCTUAL_MAX_SHARD_GROUPS"] == "40"  # what an inline Map runs at once
    assert variables["PUNCTUAL_TRIGGERS_PER_POLLER_MINUTE"] == "20000"


def test_the_tick_plans_with_the_default_triggers_per_poller_minute(default_synth: Synth) -> None:
    from punctual.runtime.settings import Settings

    tick = default_synth.resources[default_synth.logical_id(default_synth.stack.dispatch.tick.function)]
    variables = tick["Properties"]["Environment"]["Variables"]
    # The same figure the core assumed before the key existed: the default plan is unchanged.
    assert variables["PUNCTUAL_TRIGGERS_PER_POLLER_MINUTE"] == "30000"
    assert Settings().triggers_per_poller_minute == 30_000
    env = {"PUNCTUAL_TRIGGERS_PER_POLLER_MINUTE": variables["PUNCTUAL_TRIGGERS_PER_POLLER_MINUTE"]}
    assert Settings.from_env(env).triggers_per_poller_minute == 30_000


def test_the_default_minute_runs_one_inline_map_over_the_groups(default_synth: Synth) -> None:
    _, definition = _machine(default_synth)
    tick = default_synth.resources[default_synth.logical_id(default_synth.stack.dispatch.tick.function)]

    assert [state["Type"] for state in definition["States"].values()] == ["Wait", "Map"]
    assert tick["Properties"]["Environment"]["Variables"]["PUNCTUAL_GROUP_SLICES"] == "1"


def test_more_than_40_groups_run_as_a_parallel_of_inline_maps_over_the_ticks_slices(
    burst_synth: Synth,
) -> None:
    dispatch = burst_synth.stack.dispatch
    assert dispatch.burst_state_machine is not None
    props, definition = _machine(burst_synth, dispatch.burst_state_machine)
    tick = burst_synth.resources[burst_synth.logical_id(dispatch.tick.function)]
    variables = tick["Properties"]["Environment"]["Variables"]
    # The tick starts a minute of more than 40 groups on this machine, every other on the single Map
    assert variables["PUNCTUAL_BURST_STATE_MACHINE_ARN"] == {
        "Ref": burst_synth.logical_id(dispatch.burst_state_machine)
    }
    assert variables["PUNCTUAL_STATE_MACHINE_ARN"] == {"Ref": burst_synth.logical_id(dispatch.state_machine)}

    assert props["StateMachineType"] == "STANDARD"  # names stay idempotent: m-YYYYMMDDTHHMM
    assert (variables["PUNCTUAL_MAX_SHARD_GROUPS"], variables["PUNCTUAL_GROUP_SLICES"]) == ("62", "2")
    assert variables["PUNCTUAL_TRIGGERS_PER_POLLER_MINUTE"] == "9678"
    wait = definition["States"][definition["StartAt"]]
    assert wait["Type"] == "Wait" and wait["TimestampPath"] == "$.start_at"
    parallel = definition["States"][wait["Next"]]
    assert parallel["Type"] == "Parallel" and parallel["End"] is True
    assert parallel["ResultPath"] is None  # the branches' outputs are dropped

    items_paths = []
    for branch in parallel["Branches"]:
        (name,) = branch["States"]
        groups = branch["States"][name]
        assert groups["Type"] == "Map" and groups["End"] is True
        assert groups.get("MaxConcurrency", 0) == 0  # each slice holds <= 40: all at once
        assert groups["ItemSelector"] == {"item.$": "$$.Map.Item.Value", "function.$": "$.poller_function"}
        assert groups["ResultPath"] is None
        assert groups["OutputPath"] == "$.minute"  # not a copy of the whole input per branch
        processor = groups["ItemProcessor"]
        task = processor["States"][processor["StartAt"]]
        assert task["Resource"] == "arn:<AWS::Partition>:states:::lambda:invoke"
        assert task["Parameters"] == {"FunctionName.$": "$.function", "Payload.$": "$.item"}
        assert_retried_on_every_failure_then_isolated(task, processor["States"])
        items_paths.append(groups["ItemsPath"])
    assert items_paths == ["$.group_slices[0]", "$.group_slices[1]"]


def test_the_parallel_needs_no_new_permission(burst_synth: Synth, default_synth: Synth) -> None:
    from cdk_helpers import actions_on, role_statements

    def granted(synth: Synth, machine: Any) -> set[str]:
        return set(actions_on(role_statements(synth, machine.role)))

    # Unlike a Distributed Map (states:StartExecution on itself, Describe/StopExecution on children).
    burst_machine = burst_synth.stack.dispatch.burst_state_machine
    assert granted(burst_synth, burst_machine) == granted(
        default_synth, default_synth.stack.dispatch.state_machine
    )
    assert not any(action.startswith("states:") for action in granted(burst_synth, burst_machine))


def test_the_tick_looks_at_and_may_stop_only_its_own_minutes_executions(
    burst_synth: Synth, default_synth: Synth
) -> None:
    from cdk_helpers import actions_on, role_statements

    dispatch = burst_synth.stack.dispatch
    granted = actions_on(role_statements(burst_synth, dispatch.tick.role))
    machines = {f"<{burst_synth.logical_id(m)}>" for m in dispatch.state_machines}
    assert granted["states:StartExecution"] == machines
    names = {f"<{burst_synth.logical_id(m)}.Name>" for m in dispatch.state_machines}
    executions = {
        f"arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:{name}:*" for name in names
    }
    assert granted["states:DescribeExecution"] == granted["states:StopExecution"] == executions
    # One machine: its executions only (the tick re-plans a waiting minute whose burst grew)
    assert default_synth.stack.dispatch.burst_state_machine is None
    default = actions_on(role_statements(default_synth, default_synth.stack.dispatch.tick.role))
    (machine,) = default_synth.stack.dispatch.state_machines
    only = {
        f"arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:<{default_synth.logical_id(machine)}.Name>:*"
    }
    assert default["states:DescribeExecution"] == default["states:StopExecution"] == only
