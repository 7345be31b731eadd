"""The chaos probe of a call whose answer never comes (local.chaos.faults.stall): once per run, in the
thread asked for, once armed; it waits the client's read timeout, then fails as a read timeout."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from botocore.exceptions import ReadTimeoutError

from local.chaos.faults.stall import Stall

QUERY = {"event_name": "before-send.dynamodb.Query"}


def test_one_call_stalls_once_armed_in_the_thread_asked_for(tmp_path: Path) -> None:
    armed = tmp_path / "armed"
    spec = {"operation": "Query", "at": 0, "hold_s": 40, "marker": str(tmp_path / "once")}
    stall = Stall({**spec, "armed_by": str(armed), "thread": "poller-"}, read_timeout_s=0.01)
    request = SimpleNamespace(url="http://aws")
    stall(request, **QUERY)  # not armed yet: goes on
    armed.touch()
    stall(request, event_name="before-send.dynamodb.GetItem")  # another operation: goes on
    stall(request, **QUERY)  # the test's thread is not a minute's poller: goes on
    raised: list[BaseException] = []

    def poller() -> None:
        try:
            stall(request, **QUERY)
        except ReadTimeoutError as exc:
            raised.append(exc)
        stall(request, **QUERY)  # once per run: the next call goes on

    thread = threading.Thread(target=poller, name="poller-1912-g0")
    thread.start()
    thread.join()
    assert len(raised) == 1
    # A hold shorter than the read timeout delays the call, then lets it go
    short = Stall({**spec, "hold_s": 0.01, "marker": str(tmp_path / "short")}, read_timeout_s=5)
    assert short(request, **QUERY) is None


def test_an_applied_call_whose_answer_is_lost_is_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``applied``: the call reaches the service and is applied; its answer is lost and botocore
    sends it again, so a conditional put finds itself (what the core's writes must tolerate)."""
    import json

    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError
    from botocore.session import Session
    from moto import mock_aws

    from local.chaos.faults import stall

    spec = {"component": "worker-1", "operation": "PutItem", "at": 0, "applied": True}
    monkeypatch.setenv(stall.STALL_ENV, json.dumps({**spec, "marker": str(tmp_path / "once")}))
    monkeypatch.setattr(Session, "create_client", Session.create_client)  # restored after the test
    assert not stall.install_from_env("poller")  # another component's
    assert stall.install_from_env("worker-1")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1", config=Config(read_timeout=0.1))
        client.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        put = {
            "TableName": "t",
            "Item": {"pk": {"S": "a"}},
            "ConditionExpression": "attribute_not_exists(pk)",
        }
        with pytest.raises(ClientError) as sent_again:
            client.put_item(**put)
        assert sent_again.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
        assert "Item" in client.get_item(TableName="t", Key={"pk": {"S": "a"}})
        client.delete_item(TableName="t", Key={"pk": {"S": "a"}})
        client.put_item(**put)  # once per run: the next one is answered
