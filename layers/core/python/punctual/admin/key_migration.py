"""Moving timers written before the tenant was in their key into the tenant layout (issue 28).

Before, a timer row was keyed ``<due>#<job>#<slot>#<attempt>`` in the shard ``hash(job id)``,
so two tenants' alike job ids (one EventBridge Scheduler schedule name) wrote one row. Now the
key is ``<due>#<tenant>#<job>#<slot>#<attempt>`` in the shard ``hash(tenant, job id)``
(:mod:`punctual.timing.timers`). Packs keep their key (window and digest of their entries, which
name their tenants), but their entries may sit in an old shard.

Why it is safe to run while pollers and workers run:

* **Readers take both layouts.** A reader builds a timer from the row's attributes (a pack's
  entries), never from its key, so a row left where it is, is released where it is.
* **A row moves only where no poller can have looked.** It moves within its bucket's minute and
  lane, to another shard, and only while it is due more than the layout's far threshold after
  now: the rule every far-lane writer keeps, which the pollers' read-ahead and clock skew stay
  far inside. Rows due sooner stay where they are (released there, gone by TTL a day later).
* **Put first, delete second.** A crash in between leaves the timer in both places: both are
  released, as two messages with one deduplication id, and the worker's conditional claim
  starts the slot once. The next run deletes the old item.
* **Resumable and idempotent.** The scan is split into segments; after each page a segment's
  position and counts are written to ``meta#migrate-keys`` / ``<segment>/<segments>``, and a run
  started again goes on from there. Moving a timer twice writes the same item again and deletes
  an item that is gone already.

Cost: a parallel Scan reads every item of the table once (eventually consistent: half a read
unit per 4 KB), and each moved timer is one write (packed where it can be) and one delete.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from punctual.runtime.clock import Clock
from punctual.store.dynamo import schema
from punctual.store.dynamo.timers import DynamoTimers
from punctual.timing.timers import Lane, Timer, TimerLayout, shard_of, to_ms

log = logging.getLogger("punctual.migrate_keys")

COUNTS = ("items", "current", "moved", "removed", "due_soon", "past")


@dataclass
class MigrationReport:
    """What one run found and did, over every segment (finished segments of an earlier run
    included)."""

    segments: int
    dry_run: bool = False
    done_segments: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))

    @property
    def complete(self) -> bool:
        """Every segment scanned to its end: no old-layout timer due later than the threshold
        is left (of those written before the scan passed them)."""
        return self.done_segments == self.segments

    def summary(self) -> str:
        c = self.counts
        verb = "would move" if self.dry_run else "moved"
        state = "complete" if self.complete else f"{self.done_segments}/{self.segments} segments done"
        return (
            f"{c['items']} timer items read: {c['current']} timers in the tenant layout, {verb} {c['moved']}"
            f" ({c['removed']} old items deleted), left in place {c['due_soon']} due within the threshold"
            f" and {c['past']} already due; {state}"
        )


@dataclass
class _Progress:
    last: str | None = None
    done: bool = False
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))


class TimerKeyMigration:
    """Moves the table's old-layout timers to their tenant-layout keys (see the module notes).

    Parameters
    ----------
    store
        The DynamoDB timers of the table (built with the table's layout).
    layout
        The table's shard counts and far threshold.
    clock
        Decides which timers are far enough ahead to move.
    segments
        Parallel scan segments (and threads).
    page_size
        Items per Scan page (None: DynamoDB's 1 MB pages); progress is written after each page.
    """

    def __init__(
        self,
        store: DynamoTimers,
        layout: TimerLayout,
        clock: Clock,
        *,
        segments: int = 16,
        page_size: int | None = None,
    ) -> None:
        if segments < 1:
            raise ValueError("segments must be at least 1")
        self.store = store
        self.layout = layout
        self.clock = clock
        self.segments = segments
        self.page_size = page_size

    def run(
        self, *, restart: bool = False, dry_run: bool = False, max_pages: int | None = None
    ) -> MigrationReport:
        """Scan every segment not finished yet, from where it stopped; move what can be moved.

        ``restart`` starts every segment from the beginning; ``dry_run`` counts without writing
        (no timer, no progress); ``max_pages`` stops each segment after that many pages (the
        next run resumes).
        """
        if dry_run:
            progress = {segment: _Progress() for segment in range(self.segments)}
        else:
            if restart:
                for segment in range(self.segments):
                    self._save(segment, _Progress())
            progress = self._load()
        report = MigrationReport(self.segments, dry_run)
        todo = [segment for segment in range(self.segments) if not progress[segment].done]
        for segment in range(self.segments):
            if progress[segment].done:
                report.done_segments += 1
                self._add(report, progress[segment].counts)
        if todo:
            with ThreadPoolExecutor(max_workers=len(todo), thread_name_prefix="migrate-keys") as pool:
                results = list(pool.map(lambda s: self._segment(s, progress[s], dry_run, max_pages), todo))
            for finished in results:
                report.done_segments += int(finished.done)
                self._add(report, finished.counts)
        return report

    def finished(self) -> MigrationReport | None:
        """What an earlier run with this segment count did, if it scanned every segment to its end
        (a run now would read nothing: only ``restart`` scans again); None when some are left."""
        progress = self._load()
        if not all(at.done for at in progress.values()):
            return None
        report = MigrationReport(self.segments, done_segments=self.segments)
        for at in progress.values():
            self._add(report, at.counts)
        return report

    # ------------------------------------------------------------------ segments

    def _segment(self, segment: int, start: _Progress, dry_run: bool, max_pages: int | None) -> _Progress:
        request: dict[str, Any] = {
            "TableName": self.store.table,
            "Segment": segment,
            "TotalSegments": self.segments,
            **schema.timer_items().fields(),
        }
        if self.page_size:
            request["Limit"] = self.page_size
        if start.last:
            request["ExclusiveStartKey"] = json.loads(start.last)
        at = _Progress(start.last, False, dict(start.counts))
        pages = 0
        while True:
            reply = self.store.client.scan(**request)
            for item in reply.get("Items", []):
                self._item(item, at.counts, dry_run)
            last = reply.get("LastEvaluatedKey")
            at.last, at.done = (json.dumps(last, sort_keys=True) if last else None), not last
            if not dry_run:
                self._save(segment, at)
            pages += 1
            if at.done or (max_pages is not None and pages >= max_pages):
                return at
            request["ExclusiveStartKey"] = last

    def _item(self, item: dict[str, Any], counts: dict[str, int], dry_run: bool) -> None:
        """Move one timer item (a row or a pack) if it is in the old layout and far enough ahead."""
        counts["items"] += 1
        packed = "tm" in item
        found = DynamoTimers._timers_from_pack(item) if packed else [DynamoTimers._timer_from_item(item)]
        placed = [self._placed(timer) for timer in found]
        old_key = (item["pk"]["S"], item["sk"]["S"])
        if packed:
            current = all(new.shard == old.shard for new, old in zip(placed, found, strict=True))
        else:
            current = old_key == (placed[0].pk, placed[0].sk)
        if current:
            counts["current"] += len(found)
            return
        now_ms = to_ms(self.clock.now())
        if min(t.due_ms for t in found) <= now_ms + self.layout.far_threshold_s * 1000:
            # A poller may have read this bucket (or the one it would move to): leave it, it is
            # released where it is.
            counts["past" if max(t.due_ms for t in found) <= now_ms else "due_soon"] += len(found)
            return
        counts["moved"] += len(found)
        if dry_run:
            return
        self.store.put_timers(placed)  # first: a crash before the delete leaves it in both places
        written = {(row["pk"]["S"], row["sk"]["S"]) for row in self.store._timer_rows(placed)}
        if old_key not in written:
            self.store.client.delete_item(TableName=self.store.table, Key={k: item[k] for k in ("pk", "sk")})
            counts["removed"] += 1

    def _placed(self, timer: Timer) -> Timer:
        """The timer as the tenant layout places it (the same lane and due instant)."""
        count = self.layout.shard_count if timer.lane is Lane.FAR else self.layout.near_shard_count
        return replace(timer, shard=shard_of(timer.tenant, timer.job_id, count))

    # ------------------------------------------------------------------ progress

    def _load(self) -> dict[int, _Progress]:
        progress = {segment: _Progress() for segment in range(self.segments)}
        request: dict[str, Any] = {
            "TableName": self.store.table,
            **schema.partition(schema.MIGRATION_PK).fields(),
            "ConsistentRead": True,
        }
        while True:
            reply = self.store.client.query(**request)
            for item in reply.get("Items", []):
                segment_text, _, total = item["sk"]["S"].partition("/")
                if int(total) != self.segments:
                    continue  # a run with another segment count: its positions do not apply
                progress[int(segment_text)] = _Progress(
                    item["last"]["S"] if "last" in item else None,
                    bool(item.get("done", {}).get("BOOL")),
                    {name: int(item[name]["N"]) if name in item else 0 for name in COUNTS},
                )
            last = reply.get("LastEvaluatedKey")
            if not last:
                return progress
            request["ExclusiveStartKey"] = last

    def _save(self, segment: int, at: _Progress) -> None:
        self.store.client.update_item(
            TableName=self.store.table,
            Key=schema.migration_key(segment, self.segments),
            **schema.migration_progress(at.last, at.done, at.counts).fields(),
        )

    @staticmethod
    def _add(report: MigrationReport, counts: dict[str, int]) -> None:
        for name in COUNTS:
            report.counts[name] += counts.get(name, 0)


def table_layout(client: Any, table: str, far_threshold_s: int) -> TimerLayout | None:
    """The shard counts the table's timers are laid out with (None: no timer was ever written)."""
    item = client.get_item(TableName=table, Key=schema.LAYOUT_KEY, ConsistentRead=True).get("Item")
    if item is None:
        return None
    return TimerLayout(int(item["far"]["N"]), int(item["near"]["N"]), far_threshold_s)
