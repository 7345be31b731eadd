"""local/motopatch.py, patch 9: moto counts an item as DynamoDB does when an update replaces an
attribute (QA21: moto added the replaced value to the new one, so a job of a 200 KB payload, under
the API's limit, could be created but not paused, resumed, replaced or rotated in local mode: a 500)."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from local import motopatch

KB = 1000


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert motopatch.apply()
    try:
        with mock_aws():
            client = boto3.client("dynamodb")
            client.create_table(
                TableName="t",
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
            client.put_item(TableName="t", Item={"pk": {"S": "a"}, "doc": {"S": "x" * 210 * KB}})
            yield client
    finally:
        motopatch.revert()


def update(client: object, value: str, name: str = "doc") -> None:
    client.update_item(  # type: ignore[attr-defined]
        TableName="t",
        Key={"pk": {"S": "a"}},
        UpdateExpression="SET #n = :v",
        ExpressionAttributeNames={"#n": name},
        ExpressionAttributeValues={":v": {"S": value}},
    )


def test_an_update_replacing_a_large_attribute_counts_only_its_new_value(table: object) -> None:
    update(table, "y" * 210 * KB)  # 210 KB, as before: moto refused it (420 KB counted)
    got = table.get_item(TableName="t", Key={"pk": {"S": "a"}})  # type: ignore[attr-defined]
    assert got["Item"]["doc"]["S"] == "y" * 210 * KB


def test_an_update_past_the_limit_is_still_refused(table: object) -> None:
    with pytest.raises(ClientError, match="Item size"):
        update(table, "z" * 200 * KB, name="more")  # 210 + 200 KB: over, as DynamoDB says
    with pytest.raises(ClientError, match="Item size"):
        update(table, "y" * 410 * KB)  # one attribute over the limit alone
