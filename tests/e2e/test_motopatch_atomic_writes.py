"""local/motopatch.py, patch 8: moto server applies each DynamoDB write atomically, as DynamoDB does.

Unpatched, moto server answers on several threads and applies a write as read, check, store with
no lock: two ``UpdateItem`` calls adding to one set at the same moment lose one now and then, and
two conditional puts of one key can both pass. Punctual's claim (a conditional put) and an
``after(...)`` child's parent set (``ADD``) rely on DynamoDB's atomic item writes, the more so with
several Regions of local mode claiming every slot at once (local/regions.py).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from local import motopatch
from local.config import LOOPBACK, free_port

TABLE = "atomic-writes"
ROUNDS = 150
CLAIMANTS = 3


@pytest.fixture
def endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    assert motopatch.apply()
    port = free_port()
    server = ThreadedMotoServer(ip_address=LOOPBACK, port=port, verbose=False)
    server.start()
    try:
        yield f"http://{LOOPBACK}:{port}"
    finally:
        # moto's state is the process's: leave no table behind for the next test's server
        with contextlib.suppress(ClientError):
            _client(f"http://{LOOPBACK}:{port}").delete_table(TableName=TABLE)
        server.stop()
        motopatch.revert()


def _client(endpoint: str) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )


def _race(count: int, body: Any) -> None:
    """Run ``body(i)`` for i in range(count) on as many threads, released at once."""
    start = threading.Barrier(count)

    def run(i: int) -> None:
        start.wait()
        body(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)


def test_concurrent_writes_to_one_item_are_each_applied_whole(endpoint: str) -> None:
    table = _client(endpoint)
    table.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    clients = [_client(endpoint) for _ in range(CLAIMANTS)]
    lost_adds = 0
    double_claims = 0
    for n in range(ROUNDS):
        # Given two parents recording their success in one child's set at the same moment
        def add(i: int, n: int = n) -> None:
            clients[i].update_item(
                TableName=TABLE,
                Key={"pk": {"S": f"set-{n}"}},
                UpdateExpression="ADD parents :p",
                ExpressionAttributeValues={":p": {"SS": [f"parent-{i}"]}},
            )

        _race(2, add)
        got = table.get_item(TableName=TABLE, Key={"pk": {"S": f"set-{n}"}}, ConsistentRead=True)["Item"]
        lost_adds += len(got["parents"]["SS"]) != 2

        # And three Regions' workers claiming one slot at the same moment
        wins: list[int] = []

        def claim(i: int, n: int = n, wins: list[int] = wins) -> None:
            try:
                clients[i].put_item(
                    TableName=TABLE,
                    Item={"pk": {"S": f"claim-{n}"}, "owner": {"S": str(i)}},
                    ConditionExpression="attribute_not_exists(pk)",
                )
                wins.append(i)
            except ClientError as exc:
                assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"

        _race(CLAIMANTS, claim)
        double_claims += len(wins) != 1

    # Then every write was applied whole: no lost set member, one claim won each slot
    assert (lost_adds, double_claims) == (0, 0)
