"""The DynamoDB store's keys and expressions live in its schema modules (``store/dynamo/schema.py``,
and ``calendar_schema.py`` for the calendar items), never in the mixins that send them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import punctual.store.dynamo as dynamo_package
from punctual.store.dynamo import schema

PACKAGE = Path(dynamo_package.__file__).parent
# Words only an expression holds (a condition, an update, a key condition, a projection).
EXPRESSION_TEXT = re.compile(
    r"attribute_(not_)?exists|begins_with|if_not_exists|contains\(|\b(SET|ADD|REMOVE|DELETE)\s+[#:\w]|[#\w]+ (=|<|>|<=|>=|IN) [:(]"
)
REQUEST_PARTS = re.compile(r"Expression(AttributeNames|AttributeValues)?$")


def _offences(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if EXPRESSION_TEXT.search(node.value) or REQUEST_PARTS.search(node.value):
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.keyword) and node.arg and REQUEST_PARTS.search(node.arg):
            found.append(f"{path.name}:{node.lineno}: {node.arg}=")
        elif isinstance(node, ast.JoinedStr) and any(
            isinstance(v, ast.Constant) and isinstance(v.value, str) and re.search(r"#$|^#", v.value)
            for v in node.values
        ):
            found.append(f"{path.name}:{node.lineno}: a key built in place")
    return found


def test_no_module_beside_the_schema_writes_an_expression_or_a_key() -> None:
    modules = sorted(p for p in PACKAGE.glob("*.py") if not p.name.endswith("schema.py"))
    assert modules, PACKAGE
    offences = [offence for path in modules for offence in _offences(path)]
    assert offences == []


def test_the_check_finds_an_expression_written_in_place(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'client.update_item(Key={"pk": {"S": f"job#{t}#{j}"}}, UpdateExpression="SET a = :a",'
        ' ConditionExpression="attribute_exists(pk)")\n'
    )
    found = _offences(sample)
    assert [o for o in found if o.endswith("Expression=")] == [
        "sample.py:1: UpdateExpression=",
        "sample.py:1: ConditionExpression=",
    ]
    assert "sample.py:1: 'SET a = :a'" in found and "sample.py:1: 'attribute_exists(pk)'" in found
    assert "sample.py:1: a key built in place" in found


def test_an_expression_leaves_out_what_it_does_not_have() -> None:
    assert schema.CREATE.fields() == {"ConditionExpression": "attribute_not_exists(pk)"}
    take = schema.wait_for_turn("2026-01-01T00:00:00Z").fields()
    assert set(take) == {"UpdateExpression", "ExpressionAttributeValues"}


def test_a_first_claim_must_create_and_a_transition_must_find_the_record_as_expected() -> None:
    assert schema.save_execution(None, None, None, False, new=True) == schema.CREATE
    expr = schema.save_execution(["RUNNING", "PENDING"], 2, "w-1", True, new=False)
    assert expr.condition == "attribute_exists(pk) AND #st IN (:st0, :st1) AND attempt = :att AND #ow = :ow"
    assert expr.values[":st0"] == {"S": "PENDING"} and expr.values[":ow"] == {"S": "w-1"}
    unowned = schema.save_execution(["RUNNING"], None, None, True, new=False)
    assert unowned.condition == "attribute_exists(pk) AND #st IN (:st0) AND attribute_not_exists(#ow)"


def test_the_tenant_counter_refuses_only_growth_past_a_quota() -> None:
    growing = schema.tenant_counters(1, 10, 500, 1000)
    assert growing.condition is not None and ":max" in growing.condition and ":room" in growing.condition
    assert growing.values[":room"] == {"N": "500"}
    shrinking = schema.tenant_counters(-1, None, -500, None)
    assert shrinking.condition is None
