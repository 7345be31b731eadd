"""Dispatch: the minute tick, the per-minute state machine and the poller function.

Every minute an EventBridge rule invokes the ``tick`` function. The tick names a Step Functions
execution after each of the coming minutes (``m-YYYYMMDDTHHMM``) and starts it; the execution
waits until shortly before its minute (``$.start_at``), then a Map state invokes the ``poller``
once per shard group. A poller runs through its whole minute: it reads the far buckets ahead,
polls the near shards every second, and releases each slot to SQS at its instant.

Why a Lambda tick and not an EventBridge target on the state machine: EventBridge cannot name
the execution, and the name is what makes a doubled trigger of a minute harmless.

Why STANDARD and not EXPRESS
----------------------------
* Naming: a Standard execution name is unique per state machine for 90 days, so starting
  ``m-20260101T1200`` twice starts it once (the second call gets ExecutionAlreadyExists, which
  the tick ignores). Express executions are at-least-once and do not deduplicate names, so a
  doubled tick would run every poller of that minute twice.
* Duration: the execution waits up to two minutes (the tick starts the next two minutes, so a
  late or lost tick is covered by the previous one) and then runs a poller for ~80 s. Express
  allows five minutes in all; Standard a year, and the Wait costs nothing while it waits.
* Cost: Standard bills per state transition ($0.025 per 1,000), each state a step enters and
  retries; an inline Map's iterations are not billed, the states inside them are. A minute with
  one group enters Wait, Map and the task: with the execution's start counted too, 4 a minute,
  ~$4.40 a month (~$5.50 if its end were billed as well); each extra group adds one. Express
  would bill ~$1 per million requests plus duration (~110 s x 64 MB: ~$3 a month), cheaper by
  a dollar or two but without the naming guarantee, so the guarantee wins.
* No Choice state for a one-group minute: skipping the Map would cost the Choice's own
  transition, so it would save nothing.
* History: Standard keeps 90 days of execution history in the console, which is where an
  operator looks first when a minute was late.

Two poller functions, one code: the *standard* poller (``pollerMemoryMb``, 1,024 MB) and the
*lean* poller (``leanPollerMemoryMb``, 128 MB). A poller runs ~80 s of every minute whatever its
load, so at 1,024 MB an idle deployment paid ~$47 a month for pollers alone; at 128 MB it pays
~$6. The tick plans each minute and names the function in the execution input
(``poller_function``): the lean one only for a single-group minute whose planned load (sampled
far timers plus the near lane's last minute) is at most ``leanPollerMaxTriggersPerMinute``
(60), the standard one otherwise and whenever the load is unknown. The task invokes
``$.poller_function``; the state machine's role may invoke these two functions only.

A failed poller is retried at once, whatever the failure: a handler that raised, a Lambda timeout
or out-of-memory (``Lambda.Unknown``, ``Sandbox.Timedout``), ``States.TaskFailed``,
``States.Timeout``, a Lambda service error or throttling. Two retriers with the same short
backoff (1 s, x1.5, at most 2 s): the Lambda service errors with full jitter, then a catch-all
(``States.ALL``, last) with enough attempts to cover the poller's whole window (``pollerLeadS``
before the minute to the grace after it: 47, 92.5 s of delays, at the default lead of 10 s; one
more per 2 s of a longer lead). So a crashed poller is back within seconds and releases the
rest of its minute; a retry invoked after the window drains what is left and returns at once.
Only a poller that still fails after them all is caught (the ``GroupFailed`` Pass), so that
the other groups' pollers keep running (an inline Map would otherwise stop them all); the
poller-error alarm reports every failed invocation, and ``NoPollerInvoked`` five minutes in which
no poller could be invoked at all (throttled, refused: Lambda counts no error, and the minute
succeeds). The execution's timeout (``STATE_MACHINE_TIMEOUT_S``) bounds a poller that keeps timing out. Local
mode (``local/poller.py``) reads these retriers from the template and retries the same way.

More than 40 pollers a minute (``maxShardGroups`` > 40): a Parallel state of inline Maps
------------------------------------------------------------------------------------------
An inline Map runs at most 40 iterations at once, and a poller lasts its whole minute, so a
41st group would start only when a poller ends: a minute late. Up to 40 (the default) the
machine is as above: one Map over ``$.groups``. Beyond, it is ``Wait`` → a Parallel state of
``ceil(maxShardGroups / 40)`` inline Maps (7 at the most, for 256), Map ``i`` over
``$.group_slices[i]``; the tick (``PUNCTUAL_GROUP_SLICES``) splits the minute's groups into that
many slices of at most 40, empty ones included, so every branch finds its array. Each Map's
output is cut to ``$.minute`` and the Parallel's result discarded, so the branches never copy
the input back (the payload limit is 256 KB). The execution stays Standard with the same name.

Why not a Distributed Map (``sfn.DistributedMap``, up to 10,000 children):

* Cost: a Distributed Map runs each iteration as a child workflow execution. With Standard
  children every child bills its own states (the task at least) and is a separate execution;
  with Express children it bills a request and duration per group per minute. The Parallel of
  inline Maps bills one transition for the Parallel and one per Map instead of the single
  Map's one: +2 a minute with 2 Maps (up to 80 groups, $2.19 a month), +7 with 7 ($7.67); the
  pollers' tasks exactly as today; and nothing at all on the default path, which keeps its
  single Map.
* Exactly once: Express children are at-least-once, so a group's poller could run twice in a
  minute; Standard children would keep the guarantee, at the cost above.
* IAM and cdk-nag: the Distributed Map's role must start executions of its own state machine
  and describe and stop its children (``states:StartExecution`` on itself,
  ``DescribeExecution``/``StopExecution`` on ``execution:<name>:*``): a wildcard finding to
  acknowledge and a role that can start minutes itself. The Parallel needs no new permission.
* Reach: 40 x 7 = 280 pollers is more than a 256-shard deployment can use (a group owns whole
  shards), and the capacity model's burst-ready profile needs 62.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from punctual_cdk import constants as c
from punctual_cdk.components.functions import LambdaRuntime, PunctualFunction, on_schedule, retention
from punctual_cdk.components.queues import SEND_ACTIONS, Queues
from punctual_cdk.components.storage import Storage
from punctual_cdk.config import PunctualConfig
from punctual_cdk.nag import XRAY_REASON, acknowledge


class Dispatch(Construct):
    """The tick rule and function, the minute state machine, and the poller function."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PunctualConfig,
        runtime: LambdaRuntime,
        storage: Storage,
        queues: Queues,
        environment: dict[str, str],
    ) -> None:
        super().__init__(scope, construct_id)

        def poller(construct_id: str, description: str, memory_mb: int, reserved: int) -> PunctualFunction:
            made = runtime.function(
                self,
                construct_id,
                name="poller",  # one code for both pollers: only the memory differs
                description=description,
                timeout_s=c.POLLER_TIMEOUT_S,
                memory_mb=memory_mb,
                environment=environment,
                reserved_concurrency=reserved or None,
            )
            storage.grant_items(made.role, c.TABLE_ACTIONS_BY_COMPONENT["poller"])
            storage.grant_dispatch_key(made.role)  # it signs what it releases
            # Releases slots to both lanes; executions whose lease ran out of attempts are announced.
            Queues.grant(made.role, [*queues.work_queues, queues.failed], SEND_ACTIONS)
            # Reads the short lane's backlog while it has catch-up to send, to pace it
            # (punctual.dispatch.polling.catchup_pace).
            Queues.grant(made.role, queues.short, c.POLLER_QUEUE_READ_ACTIONS)
            return made

        self.poller: PunctualFunction = poller(
            "Poller",
            "Punctual poller: releases the slots of one shard group for one minute",
            config.poller_memory_mb,
            config.poller_reserved_concurrency,
        )
        # The same poller at the smallest memory, for minutes the tick plans as idle.
        self.lean_poller: PunctualFunction | None = None
        if config.lean_poller_max_triggers_per_minute > 0:
            self.lean_poller = poller(
                "LeanPoller",
                "Punctual lean poller: runs an idle minute's one shard group at small memory",
                config.lean_poller_memory_mb,
                # its own most, not the standard poller's: reserved concurrency is taken whether used or not
                c.LEAN_POLLER_RESERVED_CONCURRENCY if config.poller_reserved_concurrency else 0,
            )
        self.pollers = [p for p in (self.poller, self.lean_poller) if p is not None]
        # The catch-all's retries cover the pollers' window, which pollerLeadS lengthens.
        self._retry_attempts = c.poller_retry_max_attempts(config.poller_lead_s)

        self.state_machine = self._state_machine(config)
        # More than 40 pollers a minute: a second machine, the Parallel of inline Maps, that only
        # the minutes the tick plans with more than 40 groups run (the every-minute one stays a
        # single Map: an idle minute does not pay the Parallel's transitions).
        self.burst_state_machine: sfn.StateMachine | None = None
        if config.group_slices > 1:
            self.burst_state_machine = self._state_machine(config, sliced=True)
        self.state_machines = [m for m in (self.state_machine, self.burst_state_machine) if m is not None]

        self.tick: PunctualFunction = runtime.function(
            self,
            "Tick",
            name="tick",
            description="Punctual tick: starts the state machine execution of each coming minute",
            timeout_s=c.TICK_TIMEOUT_S,
            memory_mb=c.TICK_MEMORY_MB,
            environment={
                **environment,
                "PUNCTUAL_STATE_MACHINE_ARN": self.state_machine.state_machine_arn,
                "PUNCTUAL_BURST_STATE_MACHINE_ARN": self.burst_state_machine.state_machine_arn
                if self.burst_state_machine
                else "",
                "PUNCTUAL_SHARD_GROUPS": str(config.shard_groups),  # the fewest pollers a minute gets
                "PUNCTUAL_MAX_SHARD_GROUPS": str(config.max_shard_groups),  # the most (up to 256)
                # 1: the groups go to one inline Map ($.groups); more: split into $.group_slices.
                "PUNCTUAL_GROUP_SLICES": str(config.group_slices),
                # What one poller is planned to release in a minute: the tick's groups = load / this.
                "PUNCTUAL_TRIGGERS_PER_POLLER_MINUTE": str(config.triggers_per_poller_minute),
                "PUNCTUAL_TICK_LOOKAHEAD_MINUTES": str(c.TICK_LOOKAHEAD_MINUTES),
                "PUNCTUAL_POLLER_FUNCTION": self.poller.function.function_arn,
                "PUNCTUAL_LEAN_POLLER_FUNCTION": self.lean_poller.function.function_arn
                if self.lean_poller
                else "",
                "PUNCTUAL_LEAN_MAX_TRIGGERS_PER_MINUTE": str(config.lean_poller_max_triggers_per_minute),
            },
        )
        for machine in self.state_machines:
            machine.grant_start_execution(self.tick.role)
        # A tick looks for each minute before it plans it (a minute that exists costs no reads),
        # and a minute starts on one machine only: the tick looks on both; a minute whose burst
        # grew after it was planned is stopped while it waits and re-planned.
        self.tick.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=list(c.TICK_EXECUTION_ACTIONS),
                resources=[_executions_of(m) for m in self.state_machines],
            )
        )
        self._acknowledge_executions(self.tick.role, "the tick")
        # The second path to a minute: group 0's pollers start the next minute when no tick did
        # (punctual.runtime.composition.relay_next). A policy of its own, not the roles' default policy:
        # the functions do not wait for it, so the machines (which invoke them) can refer to it.
        relay = iam.Policy(
            self,
            "PollerRelayPolicy",
            statements=[
                iam.PolicyStatement(
                    actions=["states:StartExecution"],
                    resources=[m.state_machine_arn for m in self.state_machines],
                ),
                iam.PolicyStatement(
                    actions=list(c.TICK_EXECUTION_ACTIONS),
                    resources=[_executions_of(m) for m in self.state_machines],
                ),
            ],
            roles=[p.role for p in self.pollers],
        )
        self._acknowledge_executions(relay, "a minute's pollers")
        # Sizing the shard groups from the coming minute's timers: reads only.
        storage.grant_items(self.tick.role, c.TABLE_ACTIONS_BY_COMPONENT["tick"])
        self.rule = on_schedule(
            self,
            "EveryMinute",
            self.tick.function,
            description="Punctual: start the coming minutes' poller runs",
            schedule=c.TICK_SCHEDULE,
            max_event_age_s=c.TICK_MAX_EVENT_AGE_S,
            retry_attempts=c.TICK_RETRY_ATTEMPTS,
        )

    def _state_machine(self, config: PunctualConfig, sliced: bool = False) -> sfn.StateMachine:
        """The minute state machine: one inline Map over ``$.groups``, or (``sliced``, the burst
        machine) a Parallel of ``group_slices`` inline Maps over ``$.group_slices``."""
        prefix = "Burst" if sliced else ""
        wait = sfn.Wait(
            self,
            f"{prefix}WaitForMinute",
            state_name="WaitForMinute",
            comment="Sleep until the pollers must start: the minute minus the poller lead",
            time=sfn.WaitTime.timestamp_path("$.start_at"),
        )
        if not sliced:
            groups: sfn.IChainable = self._poll_groups("", "$.pollers", config.poller_max_concurrency)
        else:
            parallel = sfn.Parallel(
                self,
                "PollGroupSlices",
                comment="More groups than an inline Map runs at once: one Map per slice of <= 40 groups",
                result_path=sfn.JsonPath.DISCARD,
            )
            for index in range(config.group_slices):
                parallel.branch(self._poll_groups(str(index), f"$.group_slices[{index}]", 0))
            groups = parallel

        log_group = logs.LogGroup(
            self,
            f"{prefix}StateMachineLogs",
            # The vended-logs prefix spares the account's 5,120-character CloudWatch Logs resource
            # policy, which Step Functions would otherwise extend for every state machine.
            log_group_name=f"/aws/vendedlogs/states/{cdk.Stack.of(self).stack_name}-"
            + ("burst-minutes" if sliced else "minutes"),
            retention=retention(config.log_retention_days),
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        machine = sfn.StateMachine(
            self,
            f"{prefix}MinuteStateMachine",
            comment="Punctual: one execution per minute, named m-YYYYMMDDTHHMM"
            + (" (burst minutes: more than 40 pollers)" if sliced else ""),
            definition_body=sfn.DefinitionBody.from_chainable(wait.next(groups)),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=cdk.Duration.seconds(c.STATE_MACHINE_TIMEOUT_S),
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
        )
        acknowledge(
            machine.role,
            "IAM5[Resource::*]",
            "Step Functions log delivery (logs:CreateLogDelivery, GetLogDelivery, ... "
            "DescribeLogGroups) does not support resource-level permissions, and " + XRAY_REASON,
        )
        for poller in self.pollers:
            poller.function.grant_invoke(machine.role)
            acknowledge(
                machine.role,
                f"IAM5[Resource::<{self._logical_id_of(poller)}.Arn>:*]",
                "The minute task is granted each poller's ARN and its qualified ARNs (versions and "
                "aliases), as CDK grants every Lambda task; the functions are this stack's own pollers.",
            )
        return machine

    def _poll_groups(self, suffix: str, items_path: str, max_concurrency: int) -> sfn.Map:
        """An inline Map of one poller invocation per group item of ``items_path``.

        ``suffix`` "" builds the single Map of up to 40 groups (state names ``PollGroups``,
        ``PollShardGroup``, ``GroupFailed``); "0", "1", ... the Maps of a Parallel's branches.
        """
        # A Lambda invoke whose function is named by the input: the tick chose it (standard or
        # lean); IAM limits it to the two pollers. The payload is the group's item itself.
        invoke = sfn.CustomState(
            self,
            f"PollShardGroup{suffix}",
            state_json={
                "Type": "Task",
                "Comment": "One poller runs one shard group through its minute",
                "Resource": f"arn:{cdk.Aws.PARTITION}:states:::lambda:invoke",
                "Parameters": {"FunctionName.$": "$.function", "Payload.$": "$.item"},
            },
        )
        # Every failure is retried within the minute's window: Lambda service errors and
        # throttling (jittered), then everything else (a crash, a timeout, out of memory). The
        # catch-all must be alone in its ErrorEquals and the last retrier.
        invoke.add_retry(
            errors=list(c.POLLER_SERVICE_RETRY_ERRORS),
            interval=cdk.Duration.seconds(c.POLLER_RETRY_INTERVAL_S),
            max_attempts=2 * self._retry_attempts,  # full jitter: half the delay on average
            backoff_rate=c.POLLER_RETRY_BACKOFF_RATE,
            max_delay=cdk.Duration.seconds(c.POLLER_RETRY_MAX_DELAY_S),
            jitter_strategy=sfn.JitterType.FULL,
        )
        invoke.add_retry(
            errors=["States.ALL"],
            interval=cdk.Duration.seconds(c.POLLER_RETRY_INTERVAL_S),
            max_attempts=self._retry_attempts,
            backoff_rate=c.POLLER_RETRY_BACKOFF_RATE,
            max_delay=cdk.Duration.seconds(c.POLLER_RETRY_MAX_DELAY_S),
        )
        invoke.add_catch(
            sfn.Pass(self, f"GroupFailed{suffix}", comment="Keep the other groups' pollers running"),
            errors=["States.ALL"],
            result_path="$.error",
        )
        groups = sfn.Map(
            self,
            f"PollGroups{suffix}",
            comment="One poller per shard group, all at once"
            + (f" (slice {suffix} of the minute's groups)" if suffix else ""),
            items_path=items_path,
            item_selector={
                "item": sfn.JsonPath.string_at("$$.Map.Item.Value"),
                "function": sfn.JsonPath.string_at("$.poller_function"),
            },
            max_concurrency=max_concurrency,
            result_path=sfn.JsonPath.DISCARD,
            # In a Parallel, each branch's output is collected: keep it to the minute, not the input.
            output_path="$.minute" if suffix else None,
        )
        groups.item_processor(invoke)
        return groups

    def _acknowledge_executions(self, scope: Construct, who: str) -> None:
        for machine in self.state_machines:
            acknowledge(
                scope,
                "IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:"
                f"<{self._logical_id_of_machine(machine)}.Name>:*]",
                "states:DescribeExecution and StopExecution on the executions of this stack's minute "
                f"state machines (an execution's ARN carries its minute's name, unknown at deploy): {who} "
                "look(s) for a minute before starting it, on every machine, so that it starts once, and "
                "re-plan(s) a minute whose pollers have not started yet when a burst seen since needs more.",
            )

    def _logical_id_of_machine(self, machine: sfn.StateMachine) -> str:
        cfn_machine = machine.node.default_child
        assert isinstance(cfn_machine, cdk.CfnElement)
        return cdk.Stack.of(self).get_logical_id(cfn_machine)

    def _logical_id_of(self, poller: PunctualFunction) -> str:
        cfn_function = poller.function.node.default_child
        assert isinstance(cfn_function, cdk.CfnElement)
        return cdk.Stack.of(self).get_logical_id(cfn_function)


def _executions_of(machine: sfn.StateMachine) -> str:
    """The ARN pattern of every execution of ``machine``."""
    return cdk.Fn.join(
        "",
        [
            f"arn:{cdk.Aws.PARTITION}:states:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:execution:",
            machine.state_machine_name,
            ":*",
        ],
    )
