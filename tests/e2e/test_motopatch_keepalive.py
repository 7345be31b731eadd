"""local/keepalive.py serves moto over kept-alive connections and answers as werkzeug's server does."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from local import motopatch
from local.bulk_gate import BulkGate
from local.keepalive import KeepAliveMotoServer


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:

    motopatch.apply()
    running = KeepAliveMotoServer("127.0.0.1", 0)
    running.start()
    try:
        yield running.get_host_and_port()
    finally:
        running.stop()
        motopatch.revert()


def _clients(host: str, port: int) -> tuple[Any, Any]:
    session = boto3.session.Session(aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1")
    url = f"http://{host}:{port}"
    return session.client("dynamodb", endpoint_url=url), session.client("sqs", endpoint_url=url)


def test_one_connection_carries_many_calls_errors_included(server: tuple[str, int]) -> None:
    host, port = server
    connection = http.client.HTTPConnection(host, port, timeout=30)
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "DynamoDB_20120810.ListTables",
        "Authorization": "AWS4-HMAC-SHA256 Credential=k/20260101/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=host, Signature=x",
    }
    sockets = set()
    # When three calls go over one connection
    for _ in range(3):
        connection.request("POST", "/", body=b"{}", headers=headers)
        reply = connection.getresponse()
        body = reply.read()
        # Then each is answered in full and the connection stays open
        assert reply.status == 200, body
        assert "TableNames" in json.loads(body)
        assert reply.getheader("Connection") != "close"
        sockets.add(id(connection.sock))
    assert len(sockets) == 1
    connection.close()


def test_aws_calls_work_through_it(server: tuple[str, int]) -> None:
    ddb, sqs = _clients(*server)
    ddb.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.put_item(TableName="t", Item={"pk": {"S": "a"}, "v": {"N": "1"}})
    with pytest.raises(ClientError) as failed:
        ddb.put_item(TableName="t", Item={"pk": {"S": "a"}}, ConditionExpression="attribute_not_exists(pk)")
    assert failed.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert ddb.get_item(TableName="t", Key={"pk": {"S": "a"}})["Item"]["v"] == {"N": "1"}
    url = sqs.create_queue(QueueName="q.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x" * 5000, MessageGroupId="g", MessageDeduplicationId="d")
    messages = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    assert [m["Body"] for m in messages] == ["x" * 5000]


class _RecordingGate(BulkGate):
    """A gate that notes which requests it held as bulk."""

    def __init__(self) -> None:
        super().__init__(at_once=1)
        self.seen: list[bool] = []

    @contextmanager
    def admit(self, target: str, body: bytes) -> Iterator[bool]:
        with super().admit(target, body) as bulk:
            self.seen.append(bulk)
            yield bulk


def test_the_bulk_gate_sees_botocores_batch_requests() -> None:
    """The gate reads the requests as botocore sends them (the JSON protocol's target header):
    the pollers' batches take turns, the workers' single requests do not (local/bulk_gate.py)."""
    motopatch.apply()
    gate = _RecordingGate()
    running = KeepAliveMotoServer("127.0.0.1", 0, gate)
    running.start()
    try:
        ddb, sqs = _clients(*running.get_host_and_port())
        ddb.create_table(
            TableName="g",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        url = sqs.create_queue(QueueName="g.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        gate.seen.clear()
        # When a batch of two, a single read and a single-message batch go through the server
        ddb.batch_get_item(RequestItems={"g": {"Keys": [{"pk": {"S": "a"}}, {"pk": {"S": "b"}}]}})
        ddb.get_item(TableName="g", Key={"pk": {"S": "a"}})
        entries = [
            {"Id": str(i), "MessageBody": "m", "MessageGroupId": str(i), "MessageDeduplicationId": str(i)}
            for i in range(2)
        ]
        sqs.send_message_batch(QueueUrl=url, Entries=entries[:1])
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
        # Then only the two batches of more than one item took turns
        assert gate.seen == [True, False, False, True]
    finally:
        running.stop()
        motopatch.revert()
