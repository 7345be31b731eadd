"""The cost bench's meter bills the audit index's writes apart (bench/awsmeter.py).

A job item carries an audit segment, so DynamoDB writes its entry (keys and projected attributes)
to the ``audit`` index too, billed at the standard write price whether the table write was in a
transaction or not. The meter counted the table's writes only: registering a job cost one write
unit more than the registration bench said (issue 32, point 6: 6.13 + 1.00 a job).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
awsmeter = importlib.import_module("awsmeter")

DOC = {"S": "x" * 1500}  # a job document of 1.5 KB
JOB = {"pk": {"S": "job#t#a"}, "sk": {"S": "job"}, "aseg": {"N": "7"}, "doc": DOC, "state": {"S": "ENABLED"}}
TIMER = {"pk": {"S": "timer#2026-12-07T10:00#3"}, "sk": {"S": "a"}, "n": {"N": "1"}}


def _meter(stored: dict[str, Any] | None = None) -> Any:
    return awsmeter.Meter(peek_item=lambda table, key: stored)


def test_an_indexed_item_costs_its_index_a_write_per_started_kb_of_its_entry() -> None:
    assert awsmeter.index_entry_size(TIMER) == 0
    assert 1500 < awsmeter.index_entry_size(JOB) < 1600
    assert awsmeter.index_entry_size({**JOB, "big": {"S": "y" * 5000}}) == awsmeter.index_entry_size(JOB)
    assert awsmeter.index_write_units(0, 0) == 0
    assert awsmeter.index_write_units(0, 1500) == 2
    assert awsmeter.index_write_units(1500, 0) == 2  # the entry removed
    assert awsmeter.index_write_units(300, 200) == 1


def test_a_transaction_bills_the_table_twice_and_the_index_once() -> None:
    meter = _meter()
    params = {
        "TransactItems": [
            {"Put": {"TableName": "t", "Item": JOB}},
            {"Put": {"TableName": "t", "Item": TIMER}},
        ]
    }
    before = meter._sizes_before("TransactWriteItems", params)
    _, tally = meter._dynamodb("TransactWriteItems", params, {}, before)
    assert tally.wru == 2 * 2 + 2 * 1  # the job's 2 KB and the timer's 1 KB, twice each
    assert tally.index_wru == 2  # the job's entry, once; the timer is not in the index


def test_updating_and_deleting_an_indexed_item_write_its_entry() -> None:
    meter = _meter(JOB)
    put = {"TableName": "t", "Item": {**JOB, "state": {"S": "PAUSED"}}}
    _, tally = meter._dynamodb("PutItem", put, {}, meter._sizes_before("PutItem", put))
    assert tally.index_wru == 2
    delete = {"TableName": "t", "Key": {"pk": JOB["pk"], "sk": JOB["sk"]}}
    before = meter._sizes_before("DeleteItem", delete)
    _, tally = meter._dynamodb("DeleteItem", delete, {}, before)
    assert tally.index_wru == 2
    plain = {"TableName": "t", "Item": TIMER}
    _, tally = _meter().__getattribute__("_dynamodb")(
        "PutItem", plain, {}, _meter()._sizes_before("PutItem", plain)
    )
    assert tally.index_wru == 0
