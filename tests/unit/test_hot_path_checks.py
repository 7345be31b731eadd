"""The hot path's faster forms check exactly what the forms they replace checked (issue 32, point 7).

Each stored job is validated again on every read (the poller reads each job it releases), and each
message is signed and verified: the faster forms are pinned here against the slow ones.
"""

from __future__ import annotations

import json
import math
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.dispatch import queues
from punctual.dispatch.queues import DispatchMessage
from punctual.execution.keeper import LiveClaims
from punctual.execution.ports import Claim, ClaimOutcome
from punctual.models import ACCEPTED, JobSpec, base
from punctual.models.base import MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH, PAYLOAD_TOO_LARGE, check_json_value
from punctual.runtime.stop_signal import StopSignal
from punctual.security.message_auth import DispatchSigner

SIGNER = DispatchSigner("s" * 40)

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.sampled_from(["plain", "é", "\ud800", "x" * 1100])
)
_keys = st.text(max_size=6) | st.sampled_from(["k" * 1025, "\udfff", "ü"])
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=40,
)


def _outcome(check: Any, value: Any) -> str | None:
    try:
        check(value, "payload")
    except ValueError as exc:
        return str(exc)
    return None


@settings(max_examples=400, deadline=None)
@given(value=_values)
def test_the_fast_json_check_refuses_what_the_walk_refuses_with_the_same_message(value: Any) -> None:
    walked = _outcome(base._walk_json, value)
    if base._plain_json(value):
        assert walked is None  # the fast pass never lets through what the walk refuses
    assert _outcome(check_json_value, value) == walked


@settings(max_examples=400, deadline=None)
@given(value=_values)
def test_the_fast_json_checks_size_bound_is_never_below_the_size(value: Any) -> None:
    # A payload the bound says is under the limit is not measured: the bound must never be short.
    bound = base._plain_json(value)
    if bound is not None:
        assert bound >= len(json.dumps(value, separators=(",", ":")).encode())


@pytest.mark.parametrize(
    "value",
    [
        0,
        -1,
        10**30,
        -(10**30),
        2**64,
        -1.2345678901234567e-308,
        1e16,
        9e15,
        0.1,
        True,
        False,
        None,
        "",
        '\x00\x1f\x7f"\\',
        {"\n": ["\t", {"": None}]},
        [[], {}, [[]]],
    ],
)
def test_the_size_bound_of_odd_values(value: Any) -> None:
    bound = base._plain_json(value)
    assert bound is not None and bound >= len(json.dumps(value, separators=(",", ":")).encode())


@pytest.mark.parametrize(
    ("payload", "refused"),
    [
        ("x" * (MAX_PAYLOAD_BYTES - 2), False),  # its quotes make it the limit exactly
        ("x" * (MAX_PAYLOAD_BYTES - 1), True),
        ("\x01" * ((MAX_PAYLOAD_BYTES - 2) // 6), False),  # a bound over the limit: measured, fits
        ("\x01" * ((MAX_PAYLOAD_BYTES - 2) // 6 + 1), True),
        ({"k": ["é" * 43_689]}, False),  # not plain ASCII: measured (\u00e9 each)
        ({"k": ["é" * 43_690]}, True),
    ],
)
def test_a_payload_over_the_limit_is_refused_whichever_way_it_is_measured(
    payload: Any, refused: bool
) -> None:
    spec = {"schedule": "rate(1 minute)", "target": {"url": "https://example.com/h"}, "payload": payload}
    if refused:
        with pytest.raises(ValueError, match=PAYLOAD_TOO_LARGE):
            JobSpec.model_validate(spec)
        with pytest.raises(ValueError, match=PAYLOAD_TOO_LARGE):
            JobSpec.model_validate(spec, context=ACCEPTED)
    else:
        assert JobSpec.model_validate(spec).payload == payload


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        (_nested(MAX_PAYLOAD_DEPTH), False),
        (_nested(MAX_PAYLOAD_DEPTH + 1), True),
        ({"a": [0] * 10_000}, True),  # 10,001 members
        ({"a": [0] * 9_999}, False),
        ({"k" * 1025: 1}, True),
        ({1: "x"}, True),
        ([math.nan], True),
        ({"a": (1, 2)}, True),  # a tuple is not a JSON value
        (True, False),
    ],
)
def test_the_json_check_bounds(value: Any, refused: bool) -> None:
    assert (_outcome(check_json_value, value) is not None) is refused


_message_fields = st.fixed_dictionaries(
    {
        "tenant": st.text(min_size=1, max_size=10),
        "job_id": st.text(min_size=1, max_size=10),
        "slot": st.sampled_from(["2026-11-30T10:00:00Z", "2026-11-30T10:00:00Z~m1"]),
        "scheduled_at": st.just("2026-11-30T10:00:00.250Z"),
        "attempt": st.integers(min_value=1, max_value=200),
        "job_version": st.integers(min_value=1, max_value=10**9),
    },
    optional={
        "kind": st.sampled_from(["fire", "retry", "manual"]),
        "released_at": st.just("2026-11-30T09:59:58.000Z"),
        "ordered": st.booleans(),
        "not_before": st.sampled_from(["", "2026-11-30T10:00:01.500Z"]),
        "backfill": st.sampled_from(["", "bf-1:1"]),
        "resend": st.integers(min_value=0, max_value=3),
        "spec": st.sampled_from(["", '{"id":"j"}']),
        "last": st.booleans(),
        "sig": st.sampled_from(["", "ab" * 32]),
    },
)


@settings(max_examples=200, deadline=None)
@given(fields=_message_fields)
def test_a_message_built_at_once_is_the_one_its_constructor_makes(fields: dict[str, Any]) -> None:
    made = DispatchMessage(**fields)
    built = queues._built(fields)
    assert built == made and list(built.__dict__.items()) == list(made.__dict__.items())
    assert built.to_body() == made.to_body() and built.dedup_id == made.dedup_id
    # and what a body reads back as, by either path
    assert DispatchMessage.from_body(made.to_body()) == made
    assert DispatchMessage.from_body(SIGNER.sign(made).to_body()) == SIGNER.sign(made)


def test_a_claim_is_live_for_the_block_it_runs_in_and_not_after_even_on_error() -> None:
    live = LiveClaims()
    message = DispatchMessage("t", "j", "2026-11-30T10:00:00Z", "2026-11-30T10:00:00.000Z", 1, 1)
    claim = Claim(ClaimOutcome.CLAIMED, message, None)
    with live.running(claim) as running:
        assert running is claim and live.snapshot() == [claim] and len(live) == 1
    assert live.snapshot() == [] and len(live) == 0
    with pytest.raises(RuntimeError), live.running(claim):
        assert len(live) == 1
        raise RuntimeError("the run failed")
    assert len(live) == 0


def test_live_claims_hold_up_while_threads_run_claims_and_a_keeper_snapshots_them() -> None:
    # Without a lock: runs added and discarded on several threads while the keeper's thread
    # snapshots them; no snapshot fails (a dict changed while it was read), none holds a claim
    # twice or one never added, and every claim is gone once its run ended.
    live = LiveClaims()
    message = DispatchMessage("t", "j", "2026-11-30T10:00:00Z", "2026-11-30T10:00:00.000Z", 1, 1)
    claims = [Claim(ClaimOutcome.CLAIMED, message, None) for _ in range(400)]
    errors: list[BaseException] = []
    done = threading.Event()

    def run(share: list[Claim]) -> None:
        try:
            for _ in range(50):
                for claim in share:
                    live.add(claim)
                for claim in share:
                    live.discard(claim)
        except BaseException as exc:  # any failure fails the test
            errors.append(exc)

    def keep() -> None:
        ids = {id(claim) for claim in claims}
        try:
            while not done.is_set():
                seen = live.snapshot()
                assert len(seen) == len({id(claim) for claim in seen}) and {id(c) for c in seen} <= ids
                assert 0 <= len(live) <= len(claims)
        except BaseException as exc:
            errors.append(exc)

    keeper = threading.Thread(target=keep)
    runners = [threading.Thread(target=run, args=(claims[i::4],)) for i in range(4)]
    keeper.start()
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(60)
    done.set()
    keeper.join(60)
    assert errors == [] and live.snapshot() == [] and len(live) == 0


def test_a_stop_signal_does_what_an_event_does() -> None:
    signal = StopSignal()
    assert not signal.is_set() and signal.wait(0.01) is False  # a timeout, as Event.wait
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(signal.wait(60)))
    waiter.start()
    signal.set()
    waiter.join(60)
    assert woken == [True] and signal.is_set() and signal.wait(0) is True
    late = StopSignal()
    late.set()  # set before anyone waits: a wait returns at once
    assert late.wait() is True


def test_a_claim_and_a_slot_context_carry_a_stop_signal() -> None:
    message = DispatchMessage("t", "j", "2026-11-30T10:00:00Z", "2026-11-30T10:00:00.000Z", 1, 1)
    claim = Claim(ClaimOutcome.CLAIMED, message, None)
    assert (
        isinstance(claim.cancel, StopSignal)
        and claim.cancel is not Claim(ClaimOutcome.CLAIMED, message, None).cancel
    )
