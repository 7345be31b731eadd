"""Timers in DynamoDB: timer rows and packs, shard watermarks, the pollers' progress marks."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from botocore.exceptions import ClientError
from pydantic_core import from_json

from punctual.store.base import (
    ProgressMark,
    TimerRepository,
)
from punctual.store.dynamo import schema
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.keys import (
    _BATCH_WRITE_MAX,
    _KIND_CODE,
    _KIND_OF_CODE,
    _MAX_UNPROCESSED_ROUNDS,
    _PACK_MAX,
    _PACK_SPAN_MS,
    WATERMARK_CHUNK,
    UnprocessedItemsError,
    _backoff,
    _n,
    _packed_slot,
    _s,
    _slot_of_second,
)
from punctual.timing.timers import (
    LOAD_KINDS,
    TTL_AFTER_DUE_S,
    Lane,
    Timer,
    TimerKind,
    bucket_pk,
    bucket_pk_of_ms,
    due_bound,
    minute_key,
    parse_minute_key,
    sort_key,
    timer_of,
)


class DynamoTimers(DynamoBase, TimerRepository):
    """Timers in DynamoDB: timer rows and packs, shard watermarks, the pollers' progress marks."""

    # ---------------------------------------------------------------- timers
    #
    # A timer is one row when it is written with its job (registration, replace, resume, in
    # the job's transaction). Every other timer is written in a pack (``put_timers``): the
    # poller writes the next timers of a whole release at once, and those that share a bucket
    # and a due window are packed into one item (``tm``: a compact JSON list), because a
    # write costs one unit per started kilobyte and a row is ~180 bytes, a packed entry
    # ~65. A pack's sort key is its window's first instant plus a digest of its entries,
    # so rewriting the same set writes the same item, and a reader that finds one timer in
    # two items (two pollers packed it differently) returns it once, at its newest job
    # version. A lone timer is a pack of one, never a row: a poller whose read of the job was
    # a moment behind writes its chain's next timer at the old version, and as a row it would
    # replace the row a resume or replace had just written for the same slot at the new
    # version (the job's chain would end); as a pack it sits beside it and loses to it.

    @staticmethod
    def _timer_from_item(item: dict[str, Any]) -> Timer:
        lane_name, _, shard = item["pk"]["S"].split("#")
        return Timer(
            lane=Lane(lane_name),
            shard=int(shard),
            due_ms=int(item["due_ms"]["N"]),
            job_id=item["job_id"]["S"],
            tenant=item["tenant"]["S"],
            slot=item["slot"]["S"],
            attempt=int(item["attempt"]["N"]),
            kind=TimerKind(item["kind"]["S"]),
            job_version=int(item["job_version"]["N"]),
            owner=item["owner"]["S"] if "owner" in item else None,
        )

    @staticmethod
    def _pack_item(pk: str, window_ms: int, timers: Sequence[Timer]) -> dict[str, Any]:
        """One item holding several timers of one bucket, all due within one window, in sort-key
        order (:meth:`_timer_rows` sorts them)."""
        tenants: dict[str, int] = {}
        entries: list[list[Any]] = []
        load, latest = 0, timers[0].due_ms  # (counted in the one pass over the timers)
        for t in timers:
            slot = _packed_slot(t.slot)
            entry: list[Any] = [t.due_ms, t.job_id, tenants.setdefault(t.tenant, len(tenants)), slot]
            entry += [t.attempt, _KIND_CODE[t.kind], t.job_version]
            if t.owner:
                entry.append(t.owner)
            entries.append(entry)
            if t.kind in LOAD_KINDS:
                load += 1
            if t.due_ms > latest:
                latest = t.due_ms
        body = json.dumps([list(tenants), entries], separators=(",", ":"))
        digest = hashlib.blake2b(body.encode(), digest_size=8).hexdigest()
        return {
            **schema.pack_key(pk, due_bound(window_ms), digest),
            "tm": _s(body),
            "n": _n(len(entries)),
            "nf": _n(load),
            "expires_at": _n(latest // 1000 + TTL_AFTER_DUE_S),  # the latest timer's expires_at
        }

    @staticmethod
    def _timers_from_pack(item: dict[str, Any]) -> list[Timer]:
        """The timers a pack item holds. A near bucket is queried at every poll of its look-back,
        so a poller reads the same pack several times: its timers are unpacked once (a pack is
        immutable, and the cache is keyed by its partition and its whole body)."""
        return list(_unpacked(item["pk"]["S"], item["tm"]["S"]))

    @staticmethod
    def _pack_window(lane: Lane, due_ms: int) -> int:
        span = _PACK_SPAN_MS[lane]
        return due_ms - due_ms % span

    def _timer_rows(self, timers: Sequence[Timer]) -> list[dict[str, Any]]:
        """The items to write for ``timers``: packs (of one, for a lone timer)."""
        # By lane, shard and window: a window lies in one minute (its span divides one), so its
        # timers share one bucket, whose key is made once a pack, not once a timer.
        groups: dict[tuple[Lane, int, int], dict[str, Timer]] = {}
        for t in timers:
            lane, due_ms = t.lane, t.due_ms
            window = due_ms - due_ms % _PACK_SPAN_MS[lane]  # (_pack_window, in line: a call a timer)
            key = sort_key(due_ms, t.tenant, t.job_id, t.slot, t.attempt)  # (t.sk)
            groups.setdefault((lane, t.shard, window), {})[key] = t
        rows: list[dict[str, Any]] = []
        for (lane, shard, window), members in groups.items():
            pk = bucket_pk_of_ms(lane, window, shard)
            ordered = [members[sk] for sk in sorted(members)]
            for start in range(0, len(ordered), _PACK_MAX):
                rows.append(self._pack_item(pk, window, ordered[start : start + _PACK_MAX]))
        return rows

    def put_timers(self, timers: Sequence[Timer]) -> None:
        self.check_layout()
        # BatchWriteItem cannot be conditional, and need not be: a timer is immutable and an
        # item's key follows from its content, so rewriting it writes the same bytes.
        rows = [{"PutRequest": {"Item": item}} for item in self._timer_rows(timers)]
        for start in range(0, len(rows), _BATCH_WRITE_MAX):
            request: dict[str, Any] = {self.table: rows[start : start + _BATCH_WRITE_MAX]}
            for round_no in range(_MAX_UNPROCESSED_ROUNDS):
                reply = self.client.batch_write_item(RequestItems=request)
                request = reply.get("UnprocessedItems") or {}
                if not request:
                    break
                _backoff(round_no)
            else:
                raise UnprocessedItemsError("BatchWriteItem")

    def query_timers(
        self,
        lane: Lane,
        minute: datetime,
        shard: int,
        from_ms: int | None = None,
        to_ms: int | None = None,
    ) -> list[Timer]:
        """The timers of one bucket due in [from_ms, to_ms], in due order.

        A read bounded below is a poll of the near lane, which the poller repeats over a
        look-back window: it is eventually consistent (half the read cost; a row not yet
        visible is found by a later poll, and the poller's last read is a full, strongly
        consistent one). Every other read is strongly consistent.
        """
        self.check_layout()
        # A pack's sort key is its window's start: look one window further back.
        low = None if from_ms is None else max(0, from_ms - _PACK_SPAN_MS[lane] + 1)
        expr = schema.timer_range(
            bucket_pk(lane, minute, shard),
            None if low is None else due_bound(low),
            None if to_ms is None else due_bound(to_ms) + "$",  # '$' sorts after '#': due == to_ms too
        )
        found: dict[str, Timer] = {}
        request: dict[str, Any] = {
            "TableName": self.table,
            **expr.fields(),
            "ConsistentRead": from_ms is None,
        }
        lo, hi = from_ms if from_ms is not None else -1, to_ms if to_ms is not None else 1 << 62
        while True:
            reply = self.client.query(**request)
            for item in reply.get("Items", []):
                batch = self._timers_from_pack(item) if "tm" in item else [self._timer_from_item(item)]
                for timer in batch:
                    if lo <= timer.due_ms <= hi:
                        # One timer in two items (a pack and a row, or two packs): the newer job
                        # version wins, as the in-memory store's overwrite does.
                        seen = found.get(timer.sk)
                        if seen is None or timer.job_version > seen.job_version:
                            found[timer.sk] = timer
            last = reply.get("LastEvaluatedKey")
            if not last:
                return [found[sk] for sk in sorted(found)]
            request["ExclusiveStartKey"] = last

    def count_timers(self, lane: Lane, minute: datetime, shard: int) -> int:
        """The load timers of one bucket (:data:`punctual.timing.timers.LOAD_KINDS`), from their counts."""
        self.check_layout()
        request: dict[str, Any] = {
            "TableName": self.table,
            **schema.timer_counts(bucket_pk(lane, minute, shard)).fields(),
        }
        total = 0
        while True:
            reply = self.client.query(**request)
            total += sum(self._load_of(item) for item in reply.get("Items", []))
            last = reply.get("LastEvaluatedKey")
            if not last:
                return total
            request["ExclusiveStartKey"] = last

    @staticmethod
    def _load_of(item: dict[str, Any]) -> int:
        if "nf" in item:
            return int(item["nf"]["N"])
        if "n" in item:
            return int(item["n"]["N"])  # a pack written before packs counted their load
        return 1 if "kind" not in item or TimerKind(item["kind"]["S"]) in LOAD_KINDS else 0

    @staticmethod
    def _chunks(shards: Sequence[int]) -> dict[int, list[int]]:
        chunks: dict[int, list[int]] = {}
        for shard in shards:
            chunks.setdefault(shard // WATERMARK_CHUNK, []).append(shard)
        return chunks

    def get_watermarks(self, lane: Lane, shards: Sequence[int]) -> dict[int, datetime]:
        chunks = self._chunks(shards)
        keys = [schema.watermark_key(lane.value, chunk, self.marks_scope) for chunk in chunks]
        wanted = set(shards)
        marks: dict[int, datetime] = {}
        for item in self._batch_get(keys):
            for shard_text, value in item.get("m", {}).get("M", {}).items():
                if int(shard_text) in wanted:
                    marks[int(shard_text)] = parse_minute_key(value["S"])
        return marks

    def advance_watermarks(self, lane: Lane, shards: Sequence[int], minute: datetime) -> None:
        target = minute_key(minute)
        for chunk, members in self._chunks(shards).items():
            self._advance_chunk(schema.watermark_key(lane.value, chunk, self.marks_scope), members, target)

    def _advance_chunk(self, key: schema.Key, shards: list[int], target: str) -> None:
        pending = list(shards)
        for _ in range(_MAX_UNPROCESSED_ROUNDS):
            if not pending:
                return
            try:
                self.client.update_item(
                    TableName=self.table,
                    Key=key,
                    **schema.advance_watermarks(pending, target).fields(),
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                return
            except ClientError as exc:
                code = exc.response["Error"]["Code"]
                if code == "ValidationException":
                    # The map does not exist yet: create the item, then try again.
                    self._create_watermark_item(key)
                    continue
                if code != "ConditionalCheckFailedException":
                    raise
                old = exc.response.get("Item", {}).get("m", {}).get("M", {})
                # Never move a shard backward: keep only those still behind the target.
                pending = [s for s in pending if str(s) not in old or old[str(s)]["S"] < target]
        raise RuntimeError(f"could not advance watermark {key['pk']['S']}")

    def _create_watermark_item(self, key: schema.Key) -> None:
        try:
            self.client.put_item(
                TableName=self.table,
                Item={**key, "m": {"M": {}}},
                **schema.CREATE.fields(),
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    # Progress marks (punctual.store.progress): one small item per (minute, shard group),
    # ``progress#<minute>`` / ``<group>/<group_count>``, holding ``through_ms`` and ``sent_to_ms``;
    # a conditional update never moves either back. A poller reads its minute's marks once when it
    # starts (one Query).

    def put_progress(self, minute: datetime, group: int, group_count: int, through_ms: int) -> None:
        self._advance_progress(
            minute, group, group_count, lambda expires: schema.advance_progress(through_ms, expires)
        )

    def put_sent_bound(self, minute: datetime, group: int, group_count: int, sent_to_ms: int) -> None:
        self._advance_progress(
            minute, group, group_count, lambda expires: schema.advance_sent_bound(sent_to_ms, expires)
        )

    def _advance_progress(
        self, minute: datetime, group: int, group_count: int, move: Callable[[int], schema.Expression]
    ) -> None:
        expires = int(minute.timestamp()) + TTL_AFTER_DUE_S
        try:
            self.client.update_item(
                TableName=self.table,
                Key=schema.progress_key(minute, group, group_count, self.marks_scope),
                **move(expires).fields(),
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise  # a mark already further on is not an error: it stays

    def get_progress(self, minute: datetime) -> list[ProgressMark]:
        request: dict[str, Any] = {
            "TableName": self.table,
            **schema.partition(schema.progress_pk(minute, self.marks_scope)).fields(),
            "ConsistentRead": True,
        }
        marks: list[ProgressMark] = []
        while True:
            reply = self.client.query(**request)
            for item in reply.get("Items", []):
                group, _, count = item["sk"]["S"].partition("/")
                through, sent_to = item.get("through_ms"), item.get("sent_to_ms")
                marks.append(
                    ProgressMark(
                        int(group),
                        int(count),
                        None if through is None else int(through["N"]),
                        None if sent_to is None else int(sent_to["N"]),
                    )
                )
            last = reply.get("LastEvaluatedKey")
            if not last:
                return marks
            request["ExclusiveStartKey"] = last

    # Turns: one item per skip/queue job, ``job#<tenant>#<job>`` / ``turn``: ``holder`` (a slot),
    # ``since`` (ISO instant), ``waiting`` (a string set of slots). Conditional updates only.


# Packs a poller read lately, unpacked (Timer is frozen: the tuples are shared, never changed).
# One poller's near buckets hold ~200 packs within a look-back at 10,000 triggers a second (750
# packs a minute); 512 entries of ~40 timers are ~10 MB at most.
@lru_cache(maxsize=512)
def _unpacked(pk: str, body: str) -> tuple[Timer, ...]:
    lane_name, _, shard_text = pk.split("#")
    lane, shard = Lane(lane_name), int(shard_text)
    tenants, entries = from_json(body)  # json.loads' values, faster
    out: list[Timer] = []
    for entry in entries:
        due, job_id, tenant, slot, attempt, kind, version = entry[:7]
        out.append(
            timer_of(
                lane,
                shard,
                due,
                job_id,
                tenants[tenant],
                _slot_of_second(slot) if isinstance(slot, int) else slot,
                attempt,
                _KIND_OF_CODE[kind],
                version,
                entry[7] if len(entry) > 7 else None,
            )
        )
    return tuple(out)
