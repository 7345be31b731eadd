"""Issues 19, 31 and 32: execution events go to the chosen bus, by default the stack's own; only the
pollers and workers (and the tick, its Burst Shortfall events, and the chain auditor, its Chain
Repaired events) may put events there, and the stack's bus refuses everyone else by policy."""

from __future__ import annotations

from cdk_helpers import Synth, actions_on, as_list, join_parts, role_statements, statements_by_role


def _put_events(synth: Synth, role: object) -> set[str]:
    return actions_on(role_statements(synth, role)).get("events:PutEvents", set())


def _bus(synth: Synth) -> tuple[str, str]:
    (bus_id,) = synth.of_type("AWS::Events::EventBus")
    return bus_id, f"<{bus_id}.Arn>"


def test_by_default_events_go_to_a_bus_of_the_stacks_own(default_synth: Synth) -> None:
    """Issue 31, point 4: not the account's default bus, where anyone who may create rules reads
    every tenant's events."""
    stack = default_synth.stack
    bus_id, own_bus = _bus(default_synth)
    assert default_synth.resources[bus_id]["Properties"]["Name"] == f"{stack.stack_name}-events"
    for role in _publishers(stack):
        assert _put_events(default_synth, role) == {own_bus}
    assert not _put_events(default_synth, stack.api.handler.role)
    env = default_synth.resources[default_synth.logical_id(stack.workers.worker.function)]["Properties"]
    variables = env["Environment"]["Variables"]
    assert join_parts(variables["PUNCTUAL_EVENTS_BUS"]) == own_bus
    assert variables["PUNCTUAL_EVENTS_ENABLED"] == "true"
    # ...without an attempt's RUNNING and SUCCEEDED: two events a trigger, $2.00 per million
    assert variables["PUNCTUAL_EVENTS_STATUS_CHANGES"] == "problems"
    (parameter,) = default_synth.of_type("AWS::SSM::Parameter").values()
    assert own_bus in join_parts(parameter["Properties"]["Value"]).split(",")  # never a target


def _publishers(stack: object) -> list[object]:
    """Every role whose code publishes events: pollers, workers, the tick and the chain auditor."""
    return [
        *(p.role for p in stack.dispatch.pollers),  # type: ignore[attr-defined]
        *stack.workers.roles,  # type: ignore[attr-defined]
        stack.dispatch.tick.role,  # type: ignore[attr-defined]
        stack.auditor.handler.role,  # type: ignore[attr-defined]
    ]


def test_the_stacks_bus_denies_put_events_to_all_but_its_publishers(any_synth: Synth) -> None:
    stack = any_synth.stack
    bus_id, own_bus = _bus(any_synth)
    policies = [
        p["Properties"]
        for p in any_synth.of_type("AWS::Events::EventBusPolicy").values()
        if join_parts(p["Properties"]["EventBusName"]) == f"<{bus_id}>"
    ]
    statements = [s for p in policies for s in as_list(p["Statement"])]
    (deny,) = [s for s in statements if s.get("Effect") == "Deny"]
    assert deny["Principal"] == {"AWS": "*"} or deny["Principal"] == "*"
    assert as_list(deny["Action"]) == ["events:PutEvents"]
    assert join_parts(deny["Resource"]) == own_bus
    allowed = {join_parts(a) for a in as_list(deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"])}
    assert allowed == {f"<{any_synth.logical_id(r)}.Arn>" for r in _publishers(stack)}
    # QA22: a role granted PutEvents on the bus that its policy then denies publishes nothing
    # (the chain auditor's Chain Repaired events were refused so in AWS, silently).
    if stack.events.bus_arn == stack.events.bus.event_bus_arn:
        granted = {
            f"<{logical_id}.Arn>"
            for logical_id, statements in statements_by_role(any_synth).items()
            if own_bus in actions_on(statements).get("events:PutEvents", set())
        }
        assert granted and granted <= allowed
    assert not [s for s in statements if s.get("Effect", "Allow") == "Allow"]  # the policy grants nothing


def test_the_accounts_default_bus_is_still_a_choice_while_rules_move(custom_synth: Synth) -> None:
    stack = custom_synth.stack
    default_bus = "arn:<AWS::Partition>:events:<AWS::Region>:<AWS::AccountId>:event-bus/default"
    for role in (*(p.role for p in stack.dispatch.pollers), *stack.workers.roles):
        assert _put_events(custom_synth, role) == {default_bus}
    # The stack's bus is made all the same, so its rules can be written before the switch.
    _, own_bus = _bus(custom_synth)
    (parameter,) = custom_synth.of_type("AWS::SSM::Parameter").values()
    assert own_bus in join_parts(parameter["Properties"]["Value"]).split(",")
