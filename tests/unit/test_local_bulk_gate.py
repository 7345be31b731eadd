"""local/bulk_gate.py: moto server admits bulk requests a few at a time and small ones at once
(a burst's release must not starve the workers' claims: issue 31, fairness under bursts)."""

from __future__ import annotations

import json
import threading

import pytest

from local.bulk_gate import BulkGate, bulk_items

DDB = "DynamoDB_20120810."


def _body(document: object) -> bytes:
    return json.dumps(document).encode()


def test_batch_requests_count_their_items() -> None:
    keys = {"t": {"Keys": [{"pk": {"S": str(i)}} for i in range(100)]}}
    assert bulk_items(DDB + "BatchGetItem", _body({"RequestItems": keys})) == 100
    writes = {"t": [{"PutRequest": {"Item": {"pk": {"S": str(i)}}}} for i in range(25)]}
    assert bulk_items(DDB + "BatchWriteItem", _body({"RequestItems": writes})) == 25
    entries = [{"Id": str(i), "MessageBody": "x"} for i in range(10)]
    assert bulk_items("AmazonSQS.SendMessageBatch", _body({"QueueUrl": "q", "Entries": entries})) == 10


def test_single_item_batches_and_other_requests_are_not_bulk() -> None:
    # A worker's one-timer write and one-message send go through at once, as its claims do
    one = {"t": [{"PutRequest": {"Item": {"pk": {"S": "a"}}}}]}
    assert bulk_items(DDB + "BatchWriteItem", _body({"RequestItems": one})) == 1
    assert bulk_items(DDB + "GetItem", _body({"TableName": "t", "Key": {}})) == 0
    assert bulk_items(DDB + "Query", _body({"TableName": "t"})) == 0
    assert bulk_items("AmazonSQS.DeleteMessageBatch", _body({"Entries": [{}, {}]})) == 0
    assert bulk_items("AmazonSQS.ReceiveMessage", _body({"MaxNumberOfMessages": 10})) == 0


def test_a_scan_is_bulk_and_a_body_that_is_not_json_is_not() -> None:
    assert bulk_items(DDB + "Scan", b"") > 1
    assert bulk_items(DDB + "BatchGetItem", b"\xff not json") == 0
    assert bulk_items(DDB + "BatchGetItem", _body([1, 2])) == 0
    assert bulk_items(DDB + "BatchGetItem", b"") == 0


def test_at_most_two_bulk_requests_inside_while_small_ones_pass() -> None:
    gate = BulkGate(at_once=2)
    bulk = _body({"Entries": [{"Id": "1"}, {"Id": "2"}]})
    inside = threading.Semaphore(0)
    release = threading.Event()
    entered: list[int] = []

    def request(index: int) -> None:
        with gate.admit("AmazonSQS.SendMessageBatch", bulk):
            entered.append(index)
            inside.release()
            release.wait(timeout=60)

    threads = [threading.Thread(target=request, args=(i,), daemon=True) for i in range(3)]
    for thread in threads:
        thread.start()
    # Given two bulk requests inside (the third waits its turn)
    assert inside.acquire(timeout=60) and inside.acquire(timeout=60)
    assert len(entered) == 2
    # When a small request comes, it is admitted at once, bulk requests waiting or not
    with gate.admit(DDB + "PutItem", _body({"TableName": "t"})) as was_bulk:
        assert was_bulk is False
        assert len(entered) == 2  # and the waiting bulk request is still out
    # Then the third bulk request enters once one of the two leaves
    release.set()
    assert inside.acquire(timeout=60)
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(entered) == [0, 1, 2]


def test_a_gate_admits_at_least_one() -> None:
    with pytest.raises(ValueError):
        BulkGate(at_once=0)
