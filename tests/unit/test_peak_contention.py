"""The tenant's peak profile under writes at once (concurrency QA): a create that lost the race for
the profile item retries with backoff, and one that kept losing is a 503 to retry, never a 500;
a transaction DynamoDB cancelled only for load is a 503 too."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from punctual.api import problems
from punctual.security.peaks import PeakLimits, Profile
from punctual.security.tenant_quotas import PeakQuota
from punctual.store.base import TransactionConflictError
from punctual.store.memory import MemoryStore


class Contended(MemoryStore):
    """A store whose first ``losses`` profile writes lose to another writer."""

    def __init__(self, losses: int) -> None:
        super().__init__()
        self.losses = losses

    def put_peaks(self, tenant: str, doc: str, expected_version: int) -> bool:
        if self.losses > 0:
            self.losses -= 1
            return False
        return super().put_peaks(tenant, doc, expected_version)


def test_a_profile_write_that_lost_a_few_races_goes_through() -> None:
    store = Contended(losses=20)  # 16 writers at once lose about that many rounds
    PeakQuota(store, PeakLimits()).change("t", add=Profile(minutes={0: 5}))
    doc, _ = store.get_peaks("t")
    assert Profile.from_doc(doc) == Profile(minutes={0: 5})


def test_one_that_kept_losing_is_a_503_to_retry_not_a_500() -> None:
    with pytest.raises(TransactionConflictError) as lost:
        PeakQuota(Contended(losses=10**6), PeakLimits()).change("t", add=Profile(minutes={0: 5}))
    body = problems.item_problem(lost.value)  # (one job of a batch: the same answer)
    assert body["status"] == 503


@pytest.mark.parametrize(
    ("reasons", "status"),
    [
        (["None", "ThrottlingError"], 503),
        (["TransactionConflict", "None"], 503),
        (["ConditionalCheckFailed"], 500),
    ],
)
def test_a_transaction_cancelled_only_for_load_is_a_503(reasons: list[str], status: int) -> None:
    error = ClientError(
        {
            "Error": {"Code": "TransactionCanceledException"},
            "CancellationReasons": [{"Code": c} for c in reasons],
        },
        "TransactWriteItems",
    )
    reply = problems._aws_error(error)
    assert reply.status_code == status and json.loads(reply.body)["status"] == status
