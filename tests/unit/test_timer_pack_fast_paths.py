"""Timer packs written and read with the poller's shortcuts are the ones the plain code made: the
same items (bucket, window, body, digest, counts, expiry) and the same timers read back, made
without the frozen dataclass's ``__init__``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.store.dynamo import DynamoStore, schema
from punctual.store.dynamo.keys import _KIND_CODE, _PACK_MAX, _PACK_SPAN_MS, _n, _packed_slot, _s
from punctual.store.dynamo.timers import _unpacked
from punctual.timing.timers import LOAD_KINDS, Lane, Timer, TimerKind, bucket_pk_of_ms, due_bound

BASE_MS = 1_764_496_800_000  # 2026-11-30T10:00:00Z

timers = st.builds(
    Timer,
    lane=st.sampled_from(list(Lane)),
    shard=st.integers(0, 3),
    due_ms=st.one_of(
        st.integers(BASE_MS - 5_000, BASE_MS + 180_000),
        st.integers(BASE_MS, BASE_MS + 120_000).map(lambda ms: ms - ms % 1000),
        st.integers(0, 120_000),
    ),
    job_id=st.sampled_from(["job-1", "job-2", "a", "Z_9"]),
    tenant=st.sampled_from(["default", "t1", "t-2"]),
    slot=st.sampled_from(["2026-11-30T10:00:00Z", "2026-11-30T10:01:00Z", "2026-11-30T10:01:00Z~m1", "bf-1"]),
    attempt=st.integers(1, 12),
    kind=st.sampled_from(list(TimerKind)),
    job_version=st.integers(1, 3),
    owner=st.one_of(st.none(), st.just(""), st.sampled_from(["w1", "w2"])),
)


def plain_pack_item(pk: str, window_ms: int, members: list[Timer]) -> dict[str, Any]:
    """DynamoTimers._pack_item as it was written."""
    tenants: dict[str, int] = {}
    entries: list[list[Any]] = []
    for t in members:
        entry: list[Any] = [
            t.due_ms,
            t.job_id,
            tenants.setdefault(t.tenant, len(tenants)),
            _packed_slot(t.slot),
        ]
        entry += [t.attempt, _KIND_CODE[t.kind], t.job_version]
        if t.owner:
            entry.append(t.owner)
        entries.append(entry)
    body = json.dumps([list(tenants), entries], separators=(",", ":"))
    digest = hashlib.blake2b(body.encode(), digest_size=8).hexdigest()
    return {
        **schema.pack_key(pk, due_bound(window_ms), digest),
        "tm": _s(body),
        "n": _n(len(entries)),
        "nf": _n(sum(1 for t in members if t.kind in LOAD_KINDS)),
        "expires_at": _n(max(t.expires_at for t in members)),
    }


def plain_rows(written: list[Timer]) -> list[dict[str, Any]]:
    """DynamoTimers._timer_rows as it was written."""
    groups: dict[tuple[Lane, int, int], dict[str, Timer]] = {}
    for t in written:
        window = t.due_ms - t.due_ms % _PACK_SPAN_MS[t.lane]
        groups.setdefault((t.lane, t.shard, window), {})[t.sk] = t
    rows: list[dict[str, Any]] = []
    for (lane, shard, window), members in groups.items():
        pk = bucket_pk_of_ms(lane, window, shard)
        ordered = [members[sk] for sk in sorted(members)]
        for start in range(0, len(ordered), _PACK_MAX):
            rows.append(plain_pack_item(pk, window, ordered[start : start + _PACK_MAX]))
    return rows


@settings(max_examples=300, deadline=None)
@given(written=st.lists(timers, max_size=150))
def test_timers_are_packed_into_the_items_the_plain_code_wrote(written: list[Timer]) -> None:
    store = DynamoStore(client=None, table_name="t")
    assert store._timer_rows(written) == plain_rows(written)


@settings(max_examples=300, deadline=None)
@given(written=st.lists(timers, min_size=1, max_size=80))
def test_a_pack_reads_back_timers_as_their_constructor_makes_them(written: list[Timer]) -> None:
    store = DynamoStore(client=None, table_name="t")
    for row in store._timer_rows(written):
        read = _unpacked.__wrapped__(row["pk"]["S"], row["tm"]["S"])  # type: ignore[attr-defined]
        by_key = {(t.lane, t.shard, t.sk): t for t in written}
        for timer in read:
            written_one = by_key[
                timer.lane, timer.shard, timer.sk
            ]  # (the last written of a sort key is the one packed)
            fields = {f.name: getattr(written_one, f.name) for f in dataclasses.fields(Timer)}
            expected = Timer(**{**fields, "owner": fields["owner"] or None})  # (an empty owner is not packed)
            assert timer == expected and hash(timer) == hash(expected) and repr(timer) == repr(expected)
            assert vars(timer) == vars(expected) and list(vars(timer)) == list(vars(expected))
            assert pickle.loads(pickle.dumps(timer)) == expected
            assert dataclasses.replace(timer, attempt=timer.attempt + 1) == dataclasses.replace(
                expected, attempt=expected.attempt + 1
            )
