"""A job is refused when any version's document of it would not fit: this one stores a lean
document (its fields at an empty default left out), and an earlier one, run again after a
rollback, writes the whole dump; a job it could not write again would stop where it stands."""

from __future__ import annotations

from datetime import UTC, datetime

from factories import job
from punctual.models import Job
from punctual.store.dynamo.schema import job_attributes
from punctual.store.dynamo.sizes import _KEY_BYTES, JOB_ITEM_LIMIT_BYTES, item_bytes, job_item_sizes

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def _with_headers(chars: int) -> Job:
    headers = {f"x-h{i}": "é" * chars for i in range(30)}
    return job("big", now=T0, target={"type": "http", "url": "https://example.com/hook", "headers": headers})


def _lean_item_bytes(big: Job) -> int:
    return _KEY_BYTES + item_bytes(job_attributes(big))


def test_a_job_whose_lean_item_fits_but_whose_whole_document_would_not_is_too_large() -> None:
    # 30 values of 6,726 "é" (two bytes each): the lean item is just inside the limit.
    big = _with_headers(6726)
    assert _lean_item_bytes(big) <= JOB_ITEM_LIMIT_BYTES
    assert job_item_sizes(big)["the job item"] > JOB_ITEM_LIMIT_BYTES


def test_sizes_count_the_whole_document_when_it_is_longer() -> None:
    small = _with_headers(10)
    whole = small.model_dump_json(exclude={"signing_secret_enc", "signing_secret_prev_enc"})
    lean = job_attributes(small)["doc"]["S"]
    assert len(whole) > len(lean)
    assert job_item_sizes(small)["the job item"] == _lean_item_bytes(small) + len(whole.encode()) - len(
        lean.encode()
    )
