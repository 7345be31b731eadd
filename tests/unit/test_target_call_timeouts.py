"""The rule that bounds every AWS target call by the job's timeout (no network here)."""

from __future__ import annotations

import boto3
import pytest

from punctual.delivery.targets.aws_clients import (
    API_CALL_BUDGET_S,
    Boto3ClientFactory,
    CallTimeouts,
    api_call_timeouts,
    lambda_wait_timeouts,
)

JOB_TIMEOUTS = [0.3, 1, 2, 5, 10, 30, 59, 60, 61, 120, 300, 840, 3600, 7 * 24 * 3600]


@pytest.mark.parametrize("timeout_s", JOB_TIMEOUTS)
def test_an_api_call_with_its_sdk_retries_and_back_off_fits_in_the_job_timeout(timeout_s: float) -> None:
    timeouts = api_call_timeouts(timeout_s)
    assert timeouts.worst_case_s <= min(timeout_s, API_CALL_BUDGET_S)
    assert timeouts.connect_s <= 5 and timeouts.read_s <= 30


def test_sdk_retries_only_when_three_tries_fit() -> None:
    assert [api_call_timeouts(t).max_attempts for t in (1, 30, 59, 60, 300)] == [1, 1, 1, 3, 3]
    # A one-second job: one try, half a second to connect, half to answer.
    assert api_call_timeouts(1) == CallTimeouts(0.5, 0.5, 1)
    # Calls the SDK must not repeat get one try whatever the budget.
    assert api_call_timeouts(300, sdk_retries=False) == CallTimeouts(5.0, 30.0, 1)


@pytest.mark.parametrize(
    ("timeout_s", "read_s"), [(1, 6.0), (300, 305.0), (840, 845.0), (900, 905.0), (3600, 905.0)]
)
def test_a_synchronous_lambda_is_awaited_the_job_timeout_capped_at_900_s_plus_a_margin(
    timeout_s: float, read_s: float
) -> None:
    timeouts = lambda_wait_timeouts(timeout_s)
    assert (timeouts.read_s, timeouts.max_attempts) == (read_s, 1)
    # Well inside the Lambda worker's lease (timeout + 60 s), whatever the function does.
    assert timeouts.worst_case_s <= min(timeout_s, 900) + 10


def test_the_factory_builds_each_client_with_the_timeouts_asked_for() -> None:
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    factory = Boto3ClientFactory(session)
    short, long = api_call_timeouts(1), api_call_timeouts(300)

    client = factory("sqs", timeouts=short)
    config = client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (0.5, 0.5)
    assert config.retries["total_max_attempts"] == 1
    # One client per (service, region, timeouts): cached, and never shared across timeouts.
    assert factory("sqs", timeouts=short) is client
    assert factory("sqs", "us-east-1", timeouts=short) is client
    other = factory("sqs", timeouts=long)
    assert other is not client
    assert (other.meta.config.read_timeout, other.meta.config.retries["total_max_attempts"]) == (
        long.read_s,
        3,
    )
    waiting = factory("lambda", timeouts=lambda_wait_timeouts(2))
    assert waiting.meta.config.read_timeout == 7.0


def test_without_timeouts_the_factory_keeps_its_old_defaults() -> None:
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    factory = Boto3ClientFactory(session)
    assert factory("lambda").meta.config.retries["total_max_attempts"] == 1
    assert factory("sqs").meta.config.read_timeout == 30
