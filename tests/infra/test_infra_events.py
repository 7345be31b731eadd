"""Issue 19: execution events go to the chosen bus; only the pollers and workers may put them there
(and the tick, its Burst Shortfall events: issue 32)."""

from __future__ import annotations

from cdk_helpers import Synth, actions_on, join_parts, role_statements


def _put_events(synth: Synth, role: object) -> set[str]:
    return actions_on(role_statements(synth, role)).get("events:PutEvents", set())


def test_the_default_bus_is_the_only_one_pollers_and_workers_may_put_to(default_synth: Synth) -> None:
    stack = default_synth.stack
    assert stack.events.bus is None and not default_synth.of_type("AWS::Events::EventBus")
    default_bus = "arn:<AWS::Partition>:events:<AWS::Region>:<AWS::AccountId>:event-bus/default"
    for role in (*(p.role for p in stack.dispatch.pollers), *stack.workers.roles, stack.dispatch.tick.role):
        assert _put_events(default_synth, role) == {default_bus}
    assert not _put_events(default_synth, stack.api.handler.role)
    env = default_synth.resources[default_synth.logical_id(stack.workers.worker.function)]["Properties"]
    variables = env["Environment"]["Variables"]
    assert join_parts(variables["PUNCTUAL_EVENTS_BUS"]) == default_bus
    assert variables["PUNCTUAL_EVENTS_ENABLED"] == "true"


def test_a_stack_bus_is_made_granted_alone_and_never_a_target(custom_synth: Synth) -> None:
    stack = custom_synth.stack
    (bus_id,) = custom_synth.of_type("AWS::Events::EventBus")
    assert custom_synth.resources[bus_id]["Properties"]["Name"] == "PunctualCustom-events"
    own_bus = f"<{bus_id}.Arn>"
    for role in (*(p.role for p in stack.dispatch.pollers), *stack.workers.roles):
        assert _put_events(custom_synth, role) == {own_bus}
    (parameter,) = custom_synth.of_type("AWS::SSM::Parameter").values()
    assert own_bus in join_parts(parameter["Properties"]["Value"]).split(",")
