"""local/motopatch.py writes DynamoDB attribute values already in wire form as they are: the
answers must be the ones moto's shape-by-shape serializer gives, for any attribute value
(binary and sets of binary included, which keep moto's path)."""

from __future__ import annotations

from typing import Any

import boto3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local import motopatch
from punctual.store.dynamo import table_definition

_TEXT = st.text(max_size=6)
_NUMBER = st.integers(-(10**6), 10**6).map(str)
_SCALAR = st.one_of(
    _TEXT.map(lambda v: {"S": v}),
    _NUMBER.map(lambda v: {"N": v}),
    st.booleans().map(lambda v: {"BOOL": v}),
    st.just({"NULL": True}),
    st.binary(max_size=6).map(lambda v: {"B": v}),
    st.sets(_TEXT, min_size=1, max_size=3).map(lambda v: {"SS": sorted(v)}),
    st.sets(_NUMBER, min_size=1, max_size=3).map(lambda v: {"NS": sorted(v)}),
    st.sets(st.binary(min_size=1, max_size=4), min_size=1, max_size=2).map(lambda v: {"BS": sorted(v)}),
)
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        # (an empty map key breaks moto's own serializer, so the comparison leaves it out)
        st.dictionaries(st.text(min_size=1, max_size=6), inner, max_size=3).map(lambda v: {"M": v}),
        st.lists(inner, max_size=3).map(lambda v: {"L": v}),
    ),
    max_leaves=12,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(attributes=st.dictionaries(st.sampled_from(["a", "b", "doc", "x_1"]), _VALUE, max_size=4))
def test_items_read_back_the_same_patched_and_not(aws: None, attributes: dict[str, Any]) -> None:
    # Given an item with arbitrary attribute values
    client = boto3.client("dynamodb", region_name="us-east-1")
    if "t" not in client.list_tables()["TableNames"]:
        client.create_table(**table_definition("t"))
    key = {"pk": {"S": "p"}, "sk": {"S": "s"}}
    client.put_item(TableName="t", Item={**key, **attributes})

    def read() -> tuple[Any, Any]:
        got = client.get_item(TableName="t", Key=key, ConsistentRead=True)["Item"]
        queried = client.query(
            TableName="t", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "p"}}
        )["Items"]
        return got, queried

    # When it is read by unpatched and by patched moto
    plain = read()
    motopatch.apply()
    try:
        patched = read()
    finally:
        motopatch.revert()
    # Then the answers are the same
    assert patched == plain
