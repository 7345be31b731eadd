"""Every ``TransactWriteItems`` carries a ``ClientRequestToken``: the SDK's own retries of one try
(a connection reset, a timeout whose write landed) send the same request, token included, and
DynamoDB answers a repeat of an applied token within 10 minutes as that write, not as a failed
condition. Without it, a create whose answer was lost answered 409 "already exists" and a replace
a version conflict, though each was applied (QA27). A try after a transaction conflict is a new
write: it gets a token of its own."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from punctual.store.conflicts import ConflictRetry
from punctual.store.dynamo.conflicts import ConflictRetryingClient


class Transactions:
    """Answers the first ``conflicts`` transactions with a conflict, then applies them."""

    def __init__(self, conflicts: int) -> None:
        self.conflicts = conflicts
        self.calls: list[dict[str, Any]] = []

    def transact_write_items(self, **request: Any) -> dict[str, Any]:
        self.calls.append(request)
        if len(self.calls) <= self.conflicts:
            raise ClientError(
                {
                    "Error": {"Code": "TransactionCanceledException", "Message": "conflict"},
                    "CancellationReasons": [{"Code": "TransactionConflict"}],
                },
                "TransactWriteItems",
            )
        return {}

    def put_item(self, **request: Any) -> dict[str, Any]:
        self.calls.append(request)
        return {}


def test_each_transaction_try_carries_a_token_of_its_own() -> None:
    client = Transactions(conflicts=1)
    retrying = ConflictRetryingClient(client, ConflictRetry(attempts=3), sleep=lambda _: None)
    items = [{"Put": {"TableName": "t", "Item": {"pk": {"S": "a"}}}}]
    retrying.transact_write_items(TransactItems=items)
    tokens = [call.get("ClientRequestToken") for call in client.calls]
    assert len(tokens) == 2 and all(isinstance(t, str) and 1 <= len(t) <= 36 for t in tokens)
    assert tokens[0] != tokens[1]  # the try after a conflict is a new write
    assert all(call["TransactItems"] == items for call in client.calls)
    retrying.put_item(Item={"pk": {"S": "b"}})  # (no other write takes a token)
    assert "ClientRequestToken" not in client.calls[-1]
