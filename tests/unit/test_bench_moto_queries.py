"""The benchmarks' narrowed moto Query is right when several threads query one table at once.

``benchlib.fast_moto_queries`` makes moto's Query read only the queried partition. The poller
reads a minute's far buckets on several threads at once; each query must see its own partition
(before, the narrowed view was an attribute of the table that another thread's query replaced and
removed mid-read: a failed read, or another partition's items).
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
benchlib = importlib.import_module("benchlib")

PARTITIONS = [f"p{n}" for n in range(6)]


@pytest.fixture
def table(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    from moto.dynamodb.models.table import Table

    monkeypatch.setattr(Table, "query", Table.query)  # undone after the test
    monkeypatch.setattr(Table, "all_items", Table.all_items)
    client = boto3.client("dynamodb", region_name="us-east-1")
    client.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    for pk in PARTITIONS:
        for n in range(40):
            client.put_item(TableName="t", Item={"pk": {"S": pk}, "sk": {"S": f"{n:03d}"}})
    benchlib.fast_moto_queries()
    yield client


def test_each_thread_reads_its_own_partition(table: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "getswitchinterval", sys.getswitchinterval)
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    failures: list[str] = []

    def reader(pk: str) -> None:
        client = boto3.client("dynamodb", region_name="us-east-1")
        for _ in range(30):
            try:
                items = client.query(
                    TableName="t",
                    KeyConditionExpression="pk = :p",
                    ExpressionAttributeValues={":p": {"S": pk}},
                )["Items"]
            except Exception as exc:  # the old view, removed by another thread
                failures.append(f"{pk}: {exc!r}")
                continue
            if len(items) != 40 or {i["pk"]["S"] for i in items} != {pk}:
                failures.append(f"{pk}: {len(items)} items of {sorted({i['pk']['S'] for i in items})}")

    try:
        threads = [threading.Thread(target=reader, args=(pk,)) for pk in PARTITIONS * 2]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(0.005)
    assert failures == []
