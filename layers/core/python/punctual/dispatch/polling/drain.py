"""The timers of one minute of one shard group, held in due order and released once.

Used for the poller's own minute (filled ahead of time and by near-lane polls) and for
each past minute that catch-up drains. Two rules keep a restart from re-doing work:

* **A later timer proves the earlier slots of its chain.** The next fire timer of a job is
  written only after the slots before it were sent (or recorded missed), so a fire timer
  older than another one held for the same (job, version) is not released again.
* **Catch-up waits its turn.** With ``defer_catchup`` (the poller's own minute), CATCHUP
  timers (the rest of a cut-short catch-up) that fall due wait in ``lagging`` and are
  released by :meth:`release_lagging` in bounded slices, so on-time slots go first.
* **Uncertain timers are checked.** Timers due before this drain began (a restart, a late
  start, a dead poller's minute) may have been released already: the releaser reads
  their slots' execution records and does not send one a worker already started. The
  fire timers among them that a later timer proves sent are put under this poller's resend
  watch (:mod:`.rewatch`): the poller that sent them, and its watch, may have died before
  the worker that received them claimed them. A slot the earlier poller may have sent in time
  is not judged late again, whenever this drain releases it (:mod:`.redrain`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import deque
from collections.abc import Iterable

from punctual.dispatch.polling.fate_lines import FateIndex
from punctual.dispatch.polling.redrain import sent_by_ms
from punctual.dispatch.polling.release import ReleaseFailed, ReleaseReport, SlotReleaser
from punctual.dispatch.polling.rewatch import watch_earlier_sends
from punctual.store.progress import ProgressMark, sent_bounds
from punctual.timing.timers import CHAIN_KINDS, Lane, Timer, TimerKind, to_ms

ChainKey = tuple[str, str, int]  # (tenant, job, version)

log = logging.getLogger("punctual.dispatch.polling")
_CATCHUP = TimerKind.CATCHUP  # read once: an enum's member read through its class is slow (per timer)


class MinuteDrain:
    """Held timers of one minute, released in due order.

    Parameters
    ----------
    releaser
        Sends slots and writes next timers.
    uncertain_through_ms
        Timers due at or before this instant may have been released by an earlier poller.
    """

    def __init__(
        self,
        releaser: SlotReleaser,
        uncertain_through_ms: int | None,
        defer_catchup: bool = False,
    ) -> None:
        self.releaser = releaser
        self.defer_catchup = defer_catchup
        self.lagging: deque[Timer] = deque()  # CATCHUP timers due, in due order, waiting their turn
        self.uncertain_through_ms = uncertain_through_ms
        # The progress items of the minute an earlier poller released (a restart's, a past minute's
        # drain; none: no poller released any of it), and the CATCHUP timers held just after a
        # release mark (it held the mark back): until when an earlier poller may have sent each
        # shard's timers is worked out from them (:meth:`sent_by_for`), and a slot it may have sent
        # in time is not judged late again (:mod:`.redrain`)
        self.progress: list[ProgressMark] = []
        self.unmarked_ms = 0
        self.resumed_marks: set[int] = set()  # (their release marks)
        self.held_back: list[Timer] = []
        # Timers whose slots a release of this drain sent before it failed (by id: when it failed):
        # they go again as uncertain ones, their slots maybe sent by then (.redrain), not judged
        # late again over a message a worker has yet to take (release.ReleaseFailed)
        self.failed_at: dict[int, int] = {}
        # (due, turn, sk, arrival, timer): the arrival number breaks ties, so two rows with the
        # same due and sort key in different lanes (two skewed pollers wrote one next timer into
        # both) never make the heap compare Timer objects. The turn is 0 until take_turns().
        self.heap: list[tuple[int, int, str, int, Timer]] = []
        self._arrivals = itertools.count()
        self._turns: dict[int, int] = {}  # id(timer) -> its turn, once take_turns() gave them
        # Every timer taken, by what its (pk, sk) is made of, and its job version: a near timer
        # comes back in every poll of its look-back, and the key is built without formatting the
        # row's key strings. The version is part of it: a row rewritten for a job's next version
        # (a replace whose next slot is unchanged) is another timer, even when a read that was
        # behind handed this drain the old version first. The tenant is part of it: two tenants'
        # jobs may share an id.
        self.held: set[tuple[Lane, int, int, str, str, str, int, int]] = set()
        # Every Timer object taken, by its id: a read that hands back the very object it handed
        # before (the DynamoDB store's pack cache does, for a near bucket read at each poll) is
        # known by identity, before its key tuple is built. A Timer is frozen, so the same object
        # has the same key; held here, an id is never reused while it stands for a timer.
        self._taken: dict[int, Timer] = {}
        self.newest_seen: dict[ChainKey, str] = {}  # per chain, the newest fire slot held
        self.newest_released: dict[ChainKey, str] = {}  # per chain, the newest fire slot released
        # Everything held that was due at or before this was released (None: nothing yet).
        self.released_through_ms: int | None = None
        # Uncertain fire timers a later timer proves sent, still to put under the resend watch
        # (kept when the job read that does it fails, tried again at the next release).
        self.to_watch: list[Timer] = []
        # The held timers by fate line, once the catch-up pace first asked (release_urgent)
        self.fates: FateIndex | None = None
        # The latest due of a lagging timer released out of its turn (release_urgent): the
        # lagging ones due before it are holes behind the progress mark (release_holes)
        self.out_of_turn_ms: int | None = None

    def __len__(self) -> int:
        return len(self.heap) + len(self.lagging)

    def hold(self, timers: Iterable[Timer]) -> None:
        held, heap, newest, taken = self.held, self.heap, self.newest_seen, self._taken
        marks = self.resumed_marks
        for timer in timers:
            if taken.get(id(timer)) is timer:
                continue  # (this very object was taken: so was its key)
            t = timer
            key = (t.lane, t.shard, t.due_ms, t.tenant, t.job_id, t.slot, t.attempt, t.job_version)
            taken[id(timer)] = timer
            if key in held:
                continue
            held.add(key)
            if marks and timer.kind is TimerKind.CATCHUP and timer.due_ms - 1 in marks:  # (.redrain)
                self.held_back.append(timer)
            if timer.kind in CHAIN_KINDS:
                chain = (timer.tenant, timer.job_id, timer.job_version)
                if newest.get(chain, "") < timer.slot:
                    newest[chain] = timer.slot
            heapq.heappush(heap, (timer.due_ms, 0, timer.sk, next(self._arrivals), timer))

    def take_turns(self) -> None:
        """Order the timers held so far one tenant at a time within each due instant (each
        tenant's own in key order), as a release orders what it sends: for a drain released in
        slices (catch-up), where the key order (due, then tenant) put a tenant's whole burst in
        the slices before another tenant's slots at the same instant (QA: 2,000 slots of one
        tenant kept another's 5 back 100 slices, 5 s and more)."""
        counts: dict[tuple[int, str], int] = {}
        entries = sorted(self.heap)
        for index, (due_ms, _, sk, arrival, timer) in enumerate(entries):
            turn = counts[(due_ms, timer.tenant)] = counts.get((due_ms, timer.tenant), -1) + 1
            self._turns[id(timer)] = turn
            entries[index] = (due_ms, turn, sk, arrival, timer)
        heapq.heapify(entries)
        self.heap = entries

    def next_due_ms(self) -> int | None:
        return self.heap[0][0] if self.heap else None

    def release_due(self, now_ms: int, limit: int | None = None, everything: bool = False) -> ReleaseReport:
        """Release held timers due by ``now_ms`` (all of them with ``everything``), oldest first,
        at most ``limit``. On failure the timers go back to the heap and the error propagates."""
        due: list[Timer] = []
        heap = self.heap
        while heap and (everything or heap[0][0] <= now_ms) and (limit is None or len(due) < limit):
            timer = heapq.heappop(heap)[4]
            if self.defer_catchup and timer.kind is _CATCHUP:
                self.lagging.append(timer)
                if self.fates is not None:
                    self.fates.add(timer)
            else:
                due.append(timer)
        complete = not heap or heap[0][0] > now_ms  # every timer due by now_ms was taken
        report = self._release(due)
        if complete:
            self._released_through(max(now_ms, due[-1].due_ms) if due else now_ms)
        elif due:  # cut short by the limit: released up to just before the next one due
            self._released_through(due[-1].due_ms - 1)
        return report

    def release_lagging(self, limit: int) -> ReleaseReport:
        """Release at most ``limit`` of the CATCHUP timers waiting their turn, oldest first."""
        batch = [self.lagging.popleft() for _ in range(min(limit, len(self.lagging)))]
        try:
            return self._release(batch)
        except Exception:
            self.lagging.extendleft(reversed(batch))
            raise

    def release_urgent(self, by_ms: int, limit: int) -> tuple[ReleaseReport, int]:
        """Release held timers whose fate line is at or before ``by_ms`` (about ``limit`` timers at
        most), whatever their turn: held longer, their slots' fate could change (:mod:`.fate_lines`).
        Returns the report and how many timers were taken. On failure what was not released is
        held again and the error propagates.

        A lagging one goes at once. One not due yet (a past minute's, drained in due order) goes
        with every timer due before it, in order: out of its turn it would be a hole behind the
        minute's progress mark, and a poller that drains the minute again from that mark (the next
        minute's, while this one still holds it) would release it again and judge its slots late
        (QA: a catch-up ``none`` slot sent and not claimed yet was recorded MISSED)."""
        if self.fates is None:  # (the poller's own minute: only its lagging ones wait, the rest is on time)
            not_due = [] if self.defer_catchup else [entry[4] for entry in self.heap]
            self.fates = FateIndex(itertools.chain(self.lagging, not_due))
        fates = self.fates
        urgent = fates.due(by_ms, limit) if limit > 0 else []
        if not urgent:
            return ReleaseReport(), 0
        wanted = {id(timer) for timer in urgent}
        lagging = [timer for timer in self.lagging if id(timer) in wanted]
        report = ReleaseReport()
        if lagging:
            waited, self.lagging = self.lagging, deque(t for t in self.lagging if id(t) not in wanted)
            try:
                report.merge(self._release(lagging))
            except Exception:
                self.lagging = waited  # (as they waited: nothing else took any meanwhile)
                for timer in urgent:
                    fates.add(timer)
                raise
            self.out_of_turn_ms = max(self.out_of_turn_ms or 0, max(t.due_ms for t in lagging))
        held = [entry[4] for entry in self.heap if id(entry[4]) in wanted]  # (the others: released)
        if not held:
            return report, len(lagging)
        waiting = len(self.heap)
        try:
            report.merge(self.release_due(max(timer.due_ms for timer in held), limit=limit))
        finally:  # (cut short by the limit, or failed: what is still held keeps its line)
            left = {id(entry[4]) for entry in self.heap}
            for timer in held:
                if id(timer) in left:
                    fates.add(timer)
        return report, len(lagging) + waiting - len(self.heap)

    def release_holes(self) -> ReleaseReport:
        """Release, in order, the lagging timers due before the last one released out of its turn
        (:meth:`release_urgent`), for a minute handed on with lagging timers: the next poller
        drains it again from its progress mark, which cannot move past the oldest one waiting, and
        would release again those sent out of turn after it, and judge their slots late (QA: 95
        catch-up ``none`` slots sent by their lines, 50 s late, not claimed yet 15 s on, were
        recorded MISSED by the next minute's poller and never ran)."""
        through = self.out_of_turn_ms
        if through is None:
            return ReleaseReport()
        count = 0
        for timer in self.lagging:  # (in due order)
            if timer.due_ms > through:
                break
            count += 1
        report = self.release_lagging(count)
        self.out_of_turn_ms = None
        return report

    def resume(self, marks: Iterable[ProgressMark], unmarked_ms: int) -> None:
        """Release what an earlier poller may have released: its minute's progress ``marks`` (read
        before this drain holds any timer), ``unmarked_ms`` how long a poller from before the send
        bound may have released past a release mark."""
        self.progress = list(marks)
        self.unmarked_ms = unmarked_ms
        self.resumed_marks = {m.through_ms for m in self.progress if m.through_ms is not None}

    def sent_by_for(self, shard: int) -> int | None:
        """Until when the pollers this one resumes may have sent ``shard``'s timers (None: no
        poller released any): the send bound of the groups covering it, else their release mark
        and a little past (:func:`.redrain.sent_by_ms`), never past this drain's start: a poller
        may have died long before (QA: catch-up ``none`` slots due 20 s after its last mark, never
        sent, pollers down until 100 s after them, were run by a restart as copies of messages that
        never were). Per shard: a minute regrouped since (a catch-up by a poller of another
        grouping) covers shards of several groups, one of which may have died early (review of
        5895eec2: one bound for all of them took its never-sent slots for maybe sent)."""
        now_ms = self.uncertain_through_ms if self.uncertain_through_ms is not None else 0
        bound, unbounded = sent_bounds(self.progress, [shard])
        held = [timer for timer in self.held_back if timer.shard == shard]
        return sent_by_ms(unbounded, held, self.unmarked_ms, now_ms, bound)

    def _release_uncertain(self, timers: list[Timer], went: list[Timer]) -> ReleaseReport:
        """Release ``timers`` an earlier poller (or a release of this drain that failed, by when:
        :attr:`failed_at`) may have released, in one release per instant they may have been sent by;
        each release that goes is added to ``went``."""
        failed_at = self.failed_at
        report = ReleaseReport()
        by_shard: dict[int, int | None] = {}
        batches: dict[int | None, list[Timer]] = {}
        for timer in timers:
            if timer.shard not in by_shard:
                by_shard[timer.shard] = self.sent_by_for(timer.shard)
            sent_by, failed = by_shard[timer.shard], failed_at.get(id(timer))
            if failed is not None:  # a failed release's: maybe sent by its failure (or by the earlier poller)
                sent_by = failed if sent_by is None else max(sent_by, failed)
            batches.setdefault(sent_by, []).append(timer)
        for sent_by, batch in batches.items():
            report.merge(self.releaser.release(batch, uncertain=True, sent_by_ms=sent_by))
            went.extend(batch)
        return report

    def _release(self, due: list[Timer]) -> ReleaseReport:
        if not due:
            if self.to_watch:  # a failed watch is tried again at every pass, due timers or not
                self._watch_earlier([])
            return ReleaseReport()
        uncertain_ms = self.uncertain_through_ms if self.uncertain_through_ms is not None else -1
        wanted, sent_before = self._without_superseded(due, uncertain_ms)
        report = ReleaseReport(superseded=len(due) - len(wanted))
        failed = self.failed_at
        went: list[Timer] = []  # timers whose slots went out before a failure
        try:
            if failed:  # (a release of these failed before: its timers go as uncertain ones)
                certain = [t for t in wanted if t.due_ms > uncertain_ms and id(t) not in failed]
                uncertain = [t for t in wanted if t.due_ms <= uncertain_ms or id(t) in failed]
            else:
                certain = [t for t in wanted if t.due_ms > uncertain_ms]
                uncertain = [t for t in wanted if t.due_ms <= uncertain_ms]
            report.merge(self.releaser.release(certain))
            went.extend(certain)
            if uncertain:
                report.merge(self._release_uncertain(uncertain, went))
        except Exception as exc:
            failed_ms = to_ms(self.releaser.clock.now())
            for timer in [*went, *(exc.sent if isinstance(exc, ReleaseFailed) else ())]:
                failed.setdefault(id(timer), failed_ms)
            for timer in due:
                if timer.kind is TimerKind.CATCHUP and self.defer_catchup:
                    continue  # a lagging batch: the caller puts it back
                turn = self._turns.get(id(timer), 0)
                heapq.heappush(self.heap, (timer.due_ms, turn, timer.sk, next(self._arrivals), timer))
            raise
        if failed:
            for timer in due:
                failed.pop(id(timer), None)
        for timer in wanted:
            if timer.kind in CHAIN_KINDS:
                chain = (timer.tenant, timer.job_id, timer.job_version)
                if self.newest_released.get(chain, "") < timer.slot:
                    self.newest_released[chain] = timer.slot
        self._watch_earlier(sent_before)
        return report

    def _watch_earlier(self, timers: list[Timer]) -> None:
        """Put what an earlier poller sent under this one's resend watch (:mod:`.rewatch`)."""
        self.to_watch.extend(timers)
        if not self.to_watch:
            return
        try:
            watch_earlier_sends(self.releaser, self.to_watch, self.releaser.clock.now())
            self.to_watch = []
        except Exception:
            log.exception("watching %d slot(s) an earlier poller sent failed; will retry", len(self.to_watch))

    def _released_through(self, ms: int) -> None:
        if self.lagging:  # a restart must read the oldest timer still waiting its turn
            ms = min(ms, self.lagging[0].due_ms - 1)
        unreleased_before = bool(self.heap) and self.heap[0][0] <= ms
        if not unreleased_before and (self.released_through_ms is None or ms > self.released_through_ms):
            self.released_through_ms = ms

    def _without_superseded(self, due: list[Timer], uncertain_ms: int) -> tuple[list[Timer], list[Timer]]:
        """Drop fire timers whose chain has moved on, or whose slot this drain released already.
        Returns the timers to release, and the dropped ones an earlier poller released (due by
        ``uncertain_ms``, their chain moved on).

        On a multi-Region table (``every_region_releases``) a chain that moved on says only that
        *some* Region's poller sent the slot, to its own Region's queues: if that Region is lost,
        so is its message. There the slot is released here all the same (as an uncertain release
        when due by ``uncertain_ms``: a slot already started is not sent), and the claim keeps it
        to one run; only a slot this drain released already is dropped.
        """
        wanted: list[Timer] = []
        sent_before: list[Timer] = []
        seen, released = self.newest_seen, self.newest_released
        if self.releaser.config.every_region_releases:
            seen = {}
        batch: dict[ChainKey, str] = {}  # one timer per slot in this batch (two lanes may hold it)
        for timer in due:
            if timer.kind in CHAIN_KINDS:
                chain = (timer.tenant, timer.job_id, timer.job_version)
                slot = timer.slot
                if released.get(chain, "") >= slot or batch.get(chain, "") >= slot:
                    continue
                if seen.get(chain, "") > slot:
                    if timer.due_ms <= uncertain_ms:
                        sent_before.append(timer)
                    continue
                batch[chain] = slot
            wanted.append(timer)
        return wanted, sent_before

    def backlog(self, now_ms: int) -> int:
        """Held timers already due and not yet released (0 unless releases are failing)."""
        heap = self.heap
        if not heap or heap[0][0] > now_ms:
            return 0
        # Walk the heap from its root, only below due entries: a child is never due before
        # its parent, so this counts the due ones without reading the (far lane's) rest.
        count, size, stack = 0, len(heap), [0]
        while stack:
            index = stack.pop()
            if heap[index][0] <= now_ms:
                count += 1
                child = 2 * index + 1
                stack.extend(range(child, min(child + 2, size)))
        return count
