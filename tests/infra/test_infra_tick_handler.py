"""The tick names each coming minute's execution, plans its groups, and ignores a doubled trigger."""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from punctual.dispatch.tick import Tick, group_slices
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings

HANDLER = Path(__file__).resolve().parents[2] / "functions" / "tick" / "handler.py"
MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:punctual-minutes"
STANDARD_FN = "arn:aws:lambda:us-east-1:123456789012:function:punctual-poller"
LEAN_FN = "arn:aws:lambda:us-east-1:123456789012:function:punctual-lean-poller"


class TickRig:
    """The tick as the composition root builds it, from the environment at each call."""

    def __init__(self) -> None:
        self.store: object | None = None  # None: every minute's load is unknown

    def _tick(self, sfn: object = None) -> Tick:
        return Tick(Settings.from_env(), sfn, self.store)  # type: ignore[arg-type]

    def start_minutes(self, now: datetime, sfn: object) -> list[str]:
        return self._tick(sfn).start_minutes(now)

    def plan(self, minute: datetime, lead_s: int, now: datetime | None = None) -> dict:
        assert lead_s == Settings.from_env().poller_lead_s
        return self._tick().plan(minute, now)

    group_slices = staticmethod(group_slices)


@pytest.fixture
def tick(monkeypatch: pytest.MonkeyPatch) -> TickRig:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("PUNCTUAL_STATE_MACHINE_ARN", MACHINE)
    monkeypatch.setenv("PUNCTUAL_SHARD_GROUPS", "3")
    monkeypatch.setenv("PUNCTUAL_SHARD_COUNT", "512")
    monkeypatch.setenv("PUNCTUAL_NEAR_SHARD_COUNT", "32")
    monkeypatch.setenv("PUNCTUAL_POLLER_LEAD_S", "10")
    monkeypatch.setenv("PUNCTUAL_TICK_LOOKAHEAD_MINUTES", "2")
    monkeypatch.setenv("PUNCTUAL_POLLER_FUNCTION", STANDARD_FN)
    monkeypatch.setenv("PUNCTUAL_LEAN_POLLER_FUNCTION", LEAN_FN)
    return TickRig()


RELAY = {
    "state_machine_arn": MACHINE,
    "burst_state_machine_arn": "",
    "poller_function": STANDARD_FN,
    "lean_poller_function": LEAN_FN,
}


def _expected_input(minute: str, start_at: str) -> str:
    groups = [
        {"minute": minute, "group": i, "group_count": 3, "shard_count": 512, "near_shard_count": 32}
        for i in range(3)
    ]
    # Each group twice (two pollers release it), and group 0's carry the second path to the next
    # minute (what starts it when no tick did)
    pollers = [
        {**g, **({"replica": r} if r else {}), **({"relay": RELAY} if g["group"] == 0 else {})}
        for r in (0, 1)
        for g in groups
    ]
    return json.dumps(
        {
            "minute": minute,
            "start_at": start_at,
            "poller": "standard",  # no store: the load is unknown, never the lean poller
            "estimated_far_timers": 0,
            "recent_near_timers": None,
            "forecast_near_slots": 0,  # the minute-load ledger's forecast (none: no store)
            "forecast_near_head": 0,
            "drained_behind": False,
            "groups": groups,
            "pollers": pollers,
            "poller_function": STANDARD_FN,
        }
    )


def _execution(name: str) -> dict[str, str]:
    return {"executionArn": MACHINE.replace(":stateMachine:", ":execution:") + ":" + name}


def _look(stub: Stubber, name: str, exists: bool) -> None:
    """The tick looks for a minute before it plans it (DescribeExecution)."""
    if exists:
        stub.add_response(
            "describe_execution",
            {
                **_execution(name),
                "stateMachineArn": MACHINE,
                "status": "RUNNING",
                "startDate": datetime(2026, 1, 1, tzinfo=UTC),
            },
            _execution(name),
        )
    else:
        stub.add_client_error(
            "describe_execution", service_error_code="ExecutionDoesNotExist", http_status_code=400
        )


def test_the_handler_is_the_composition_roots_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("tick_handler_under_test", HANDLER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    now = datetime(2026, 3, 1, 12, 0, 7, tzinfo=UTC)

    class Built:
        clock = ManualClock(now)
        seen: list[datetime] = []

        def tick(self, metrics: object = None) -> object:
            seen = self.seen

            class Fake:
                def start_minutes(self, at: datetime) -> list[str]:
                    seen.append(at)
                    return ["m-20260301T1201"]

            return Fake()

    built = Built()
    monkeypatch.setattr(module, "container", lambda: built)
    assert module.handler({}, None) == {"started": ["m-20260301T1201"]}
    assert built.seen == [now]  # the time comes from the container's clock


def test_starts_the_next_minutes_named_after_them(tick: TickRig) -> None:
    # Given a tick that fires a few seconds into 23:59 on the last day of a year
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    now = datetime(2026, 12, 31, 23, 59, 7, 500_000, tzinfo=UTC)
    with Stubber(sfn) as stub:
        _look(stub, "m-20261231T2359", exists=True)  # its own minute: started by the tick before
        _look(stub, "m-20270101T0000", exists=False)
        _look(stub, "m-20270101T0001", exists=False)
        stub.add_response(
            "start_execution",
            {"executionArn": f"{MACHINE}:m-20270101T0000", "startDate": now},
            {
                "stateMachineArn": MACHINE,
                "name": "m-20270101T0000",  # no colons: they are illegal in execution names
                "input": _expected_input("2027-01-01T00:00:00Z", "2026-12-31T23:59:50Z"),
            },
        )
        stub.add_response(
            "start_execution",
            {"executionArn": f"{MACHINE}:m-20270101T0001", "startDate": now},
            {
                "stateMachineArn": MACHINE,
                "name": "m-20270101T0001",
                "input": _expected_input("2027-01-01T00:01:00Z", "2027-01-01T00:00:50Z"),
            },
        )

        # When it runs
        started = tick.start_minutes(now, sfn)

        # Then it started both coming minutes, each waiting until its lead before the minute
        stub.assert_no_pending_responses()
    assert started == ["m-20270101T0000", "m-20270101T0001"]


def test_a_minute_that_already_exists_is_a_no_op(tick: TickRig) -> None:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    now = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    with Stubber(sfn) as stub:
        # The previous tick already started 12:00 (with its own plan): looked for, not planned...
        _look(stub, "m-20260301T1200", exists=True)
        # ...and another tick (a doubled delivery) starts 12:01 between this one's look and start
        _look(stub, "m-20260301T1201", exists=False)
        _look(stub, "m-20260301T1202", exists=False)
        stub.add_client_error(
            "start_execution", service_error_code="ExecutionAlreadyExists", http_status_code=400
        )
        stub.add_response("start_execution", {"executionArn": f"{MACHINE}:m-20260301T1202", "startDate": now})

        started = tick.start_minutes(now, sfn)

    # ...so only 12:02 is new, and nothing was raised.
    assert started == ["m-20260301T1202"]


def test_other_errors_are_not_swallowed(tick: TickRig) -> None:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    with Stubber(sfn) as stub:
        stub.add_client_error(
            "start_execution", service_error_code="StateMachineDoesNotExist", http_status_code=400
        )

        with pytest.raises(sfn.exceptions.StateMachineDoesNotExist):
            tick.start_minutes(datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC), sfn)


class _RecordingSfn:
    """A Step Functions client that records StartExecution calls (Stubber cannot show the input)."""

    exceptions = boto3.client("stepfunctions", region_name="us-east-1").exceptions

    def __init__(self, existing: tuple[str, ...] = ("m-20260301T1200",)) -> None:
        self.calls: list[dict] = []
        self.existing = set(existing)  # the tick's own minute: started by the tick before

    def start_execution(self, **params: str) -> dict:
        self.calls.append(params)
        return {"executionArn": f"{MACHINE}:{params['name']}"}

    def describe_execution(self, executionArn: str) -> dict:
        if executionArn.rsplit(":", 1)[-1] not in self.existing:
            raise self.exceptions.ExecutionDoesNotExist({"Error": {"Code": "ExecutionDoesNotExist"}}, "x")
        return {"executionArn": executionArn}


class _CountingStore:
    """Answers the planner's far-bucket counts with the same number for every shard."""

    def __init__(self, per_shard: int) -> None:
        self.per_shard = per_shard

    def count_timers(self, *args: object) -> int:
        return self.per_shard

    def get_watermarks(self, *args: object) -> dict:
        return {}  # a new deployment: no shard drained yet, none behind


class _BrokenStore:
    def count_timers(self, *args: object) -> int:
        raise RuntimeError("DynamoDB is unavailable")


@pytest.mark.parametrize("store", [_CountingStore(0), _BrokenStore()], ids=["idle", "store-failing"])
def test_core_planner_sizes_minutes_and_never_blocks_them(
    tick: TickRig, monkeypatch: pytest.MonkeyPatch, store: object
) -> None:
    # Given the core's planner, with a store that is idle or failing
    tick.store = store
    sfn = _RecordingSfn()
    now = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)

    # When the tick runs, Then both minutes start with the minimum groups (PUNCTUAL_SHARD_GROUPS)
    assert tick.start_minutes(now, sfn) == ["m-20260301T1201", "m-20260301T1202"]

    first = json.loads(sfn.calls[0]["input"])
    assert first["start_at"] == "2026-03-01T12:00:50Z"
    assert [g["group"] for g in first["groups"]] == [0, 1, 2]
    assert {g["group_count"] for g in first["groups"]} == {3}
    # Three groups (the configured minimum) always run on the standard poller.
    assert first["poller_function"] == STANDARD_FN


class _NearStore:
    """Far buckets empty; each near bucket of the last whole minute holds ``per_near_shard``."""

    def __init__(self, per_near_shard: int) -> None:
        self.per_near_shard = per_near_shard
        self.near_minutes: set[datetime] = set()

    def count_timers(self, lane: object, minute: datetime, shard: int) -> int:
        if str(lane) == "near":
            self.near_minutes.add(minute)
            return self.per_near_shard
        return 0

    def get_watermarks(self, *args: object) -> dict:
        return {}


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        (_CountingStore(0), LEAN_FN),  # idle: the lean poller
        (_NearStore(1), LEAN_FN),  # a few near timers a minute: still lean
        (_NearStore(100), STANDARD_FN),  # 800 near timers last minute: the standard poller
        (_CountingStore(1), STANDARD_FN),  # far timers in every sampled bucket: ~256 a minute
        (_BrokenStore(), STANDARD_FN),  # load unknown: never the lean poller
    ],
    ids=["idle", "few-near", "busy-near", "busy-far", "store-failing"],
)
def test_an_idle_minute_runs_on_the_lean_poller_and_nothing_else_does(
    tick: TickRig, monkeypatch: pytest.MonkeyPatch, store: object, expected: str
) -> None:
    # Given one group by default and the core's planner
    monkeypatch.setenv("PUNCTUAL_SHARD_GROUPS", "1")
    monkeypatch.setenv("PUNCTUAL_SHARD_COUNT", "256")
    monkeypatch.setenv("PUNCTUAL_NEAR_SHARD_COUNT", "8")
    tick.store = store
    now = datetime(2026, 3, 1, 12, 0, 3, tzinfo=UTC)

    # When the tick plans the coming minute
    plan = tick.plan(datetime(2026, 3, 1, 12, 1, tzinfo=UTC), lead_s=10, now=now)

    # Then the function follows the planned load, and the near lane was read for the last whole minute
    assert plan["poller_function"] == expected
    assert len(plan["groups"]) == 1
    if isinstance(store, _NearStore):  # the last whole minute (and, few there, the current one)
        assert datetime(2026, 3, 1, 11, 59, tzinfo=UTC) in store.near_minutes
        assert store.near_minutes <= {
            datetime(2026, 3, 1, 11, 59, tzinfo=UTC),
            datetime(2026, 3, 1, 12, 0, tzinfo=UTC),
        }


def test_without_a_lean_poller_every_minute_runs_on_the_standard_one(
    tick: TickRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUNCTUAL_SHARD_GROUPS", "1")
    monkeypatch.setenv("PUNCTUAL_LEAN_POLLER_FUNCTION", "")  # leanPollerMaxTriggersPerMinute=0
    tick.store = _CountingStore(0)

    plan = tick.plan(datetime(2026, 3, 1, 12, 1, tzinfo=UTC), lead_s=10)

    assert plan["poller"] == "lean" and plan["poller_function"] == STANDARD_FN


def test_a_burst_gets_more_groups_up_to_the_maximum(tick: TickRig, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a minute whose sampled far buckets hold 20,000 timers each (10 million in all)
    monkeypatch.setenv("PUNCTUAL_MAX_SHARD_GROUPS", "40")
    tick.store = _CountingStore(20_000)

    plan = tick.plan(datetime(2026, 3, 1, 12, 1, tzinfo=UTC), lead_s=10)

    assert 3 < len(plan["groups"]) <= 40
    assert "group_slices" not in plan  # one inline Map: the state machine reads $.groups


@pytest.mark.parametrize("count", [1, 39, 40, 41, 62, 79, 80, 256])
def test_group_slices_keep_every_group_in_order_and_at_most_40_a_slice(tick: TickRig, count: int) -> None:
    slices = -(-256 // 40)  # what maxShardGroups 256 deploys: 7 inline Maps
    groups = [{"group": index} for index in range(count)]

    split = tick.group_slices(groups, slices)

    assert len(split) == slices  # every branch of the Parallel finds its array, empty or not
    assert [g for part in split for g in part] == groups
    assert max(len(part) for part in split) <= 40
    assert max(len(part) for part in split) - min(len(part) for part in split) <= 1


def test_more_than_40_groups_are_planned_into_the_state_machines_slices(
    tick: TickRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the burst-ready settings: 62 groups at most, in two inline Maps, 9,678 triggers a poller
    monkeypatch.setenv("PUNCTUAL_MAX_SHARD_GROUPS", "62")
    monkeypatch.setenv("PUNCTUAL_GROUP_SLICES", "2")
    monkeypatch.setenv("PUNCTUAL_TRIGGERS_PER_POLLER_MINUTE", "9678")
    monkeypatch.setenv("PUNCTUAL_SHARD_COUNT", "288")
    monkeypatch.setenv("PUNCTUAL_NEAR_SHARD_COUNT", "288")
    # and a minute whose far buckets hold 600,000 timers (2,084 in each of 288; near as many)
    tick.store = _CountingStore(2_084)

    plan = tick.plan(datetime(2026, 3, 1, 12, 1, tzinfo=UTC), lead_s=10)

    # Then it gets all 62 pollers, 31 in each Map's slice, every group exactly once (one poller
    # each: 124 would not run at once in two Maps of 40)
    assert len(plan["groups"]) == 62 == plan["groups"][0]["group_count"]
    assert [len(part) for part in plan["group_slices"]] == [31, 31]
    assert [g for part in plan["group_slices"] for g in part] == plan["pollers"]
    assert [p["group"] for p in plan["pollers"]] == list(range(62))
    # and the input stays far under Step Functions' 256 KB, even at 256 groups in 7 slices
    assert len(json.dumps(plan)) < 25_000  # groups, the Map's items and their slices: three copies
    monkeypatch.setenv("PUNCTUAL_MAX_SHARD_GROUPS", "256")
    monkeypatch.setenv("PUNCTUAL_GROUP_SLICES", "7")
    monkeypatch.setenv("PUNCTUAL_TRIGGERS_PER_POLLER_MINUTE", "100")
    biggest = tick.plan(datetime(2026, 3, 1, 12, 1, tzinfo=UTC), lead_s=10)
    assert len(biggest["groups"]) == 256 and len(biggest["group_slices"]) == 7
    assert len(json.dumps(biggest)) < 100_000
