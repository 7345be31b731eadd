"""A webhook never reaches the AWS endpoint the components call (local mode's moto server).

The endpoint and the receiver are ``test_http_target``'s HTTP servers on 127.0.0.1.
"""

from __future__ import annotations

import pytest
from test_http_target import LOOPBACK, Receiver, answer, ctx

from punctual.delivery.targets import DefaultTargetInvoker
from punctual.delivery.targets.base import Outcome
from punctual.models import HttpTarget
from punctual.runtime.settings import Settings


def test_the_deployments_own_aws_endpoint_is_never_called_whatever_the_allow_list_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """QA23: local mode allows loopback for its receiver, and its moto server is on loopback too: a
    webhook with ``X-Amz-Target: DynamoDB_20120810.DeleteTable`` deleted the deployment's table."""
    moto, receiver = Receiver(), Receiver()  # the AWS endpoint the components call; a tenant's receiver
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", moto.url(""))
        invoker = DefaultTargetInvoker(None, Settings(target_allow_cidrs=list(LOOPBACK)))
        headers = {"X-Amz-Target": "DynamoDB_20120810.DeleteTable"}
        for host in ("127.0.0.1", "localhost", "127.0.0.2"):
            result = invoker.invoke(HttpTarget(url=moto.url("/", host=host), headers=headers), "{}", ctx())
            assert result.outcome is Outcome.PERMANENT, (host, result.summary)
            assert "own AWS endpoint" in result.summary
        receiver.routes["/hook"] = answer(307, headers={"Location": moto.url("/")})
        hop = invoker.invoke(HttpTarget(url=receiver.url(), follow_redirects=True), {}, ctx())
        assert hop.outcome is Outcome.PERMANENT and "own AWS endpoint" in hop.summary
        assert moto.requests == []
        other = invoker.invoke(HttpTarget(url=receiver.url("/other")), {}, ctx())  # another port
        assert other.outcome is Outcome.SUCCEEDED
    finally:
        moto.close()
        receiver.close()
