"""Fields a newer version wrote into a job's document, kept across this version's writes of it.

After a rollback this version reads such a document without what it does not know
(:func:`punctual.models.base.without_unknown_fields`). A write of that job by this version (a
pause, a resume, a completion, a replace) would then drop those fields for good, and the newer
version, rolled forward again, would find its job changed (review: one pause lost a target's
signature scheme and a retry policy's statuses). So the read keeps them here, by tenant and job,
with the version read, and the job's next write that keeps its spec (its version one more, its
spec version and creation the same) puts them back where their place still exists; a replace
writes the user's spec as sent. A process that did not read the job itself (another
API container) writes without them: rare, and logged where they were read. Bounded; only jobs
that had such fields are kept.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from punctual.models import Job

MAX_KEPT = 1024
Removed = list[tuple[tuple[Any, ...], Any]]

# (tenant, job) -> (the version read, its creation and spec version, the fields taken away)
_kept: OrderedDict[tuple[str, str], tuple[int, Any, int, Removed]] = OrderedDict()
_lock = threading.Lock()


def keep(job: Job, removed: Removed) -> None:
    """The fields ``job``'s document held that this version does not know (read at its version)."""
    if not removed:
        return
    with _lock:
        _kept[(job.tenant, job.id)] = (job.version, job.created_at, job.spec_since, removed)
        _kept.move_to_end((job.tenant, job.id))
        while len(_kept) > MAX_KEPT:
            _kept.popitem(last=False)


def with_kept(job: Job, document: str) -> str:
    """``document`` (``job``'s, to be written) with the fields kept for the job at the version
    before this one, each where its place still is; as it is otherwise (the usual case: no read)."""
    if not _kept:
        return document
    found = _kept.get((job.tenant, job.id))
    # The same job (not one created again at its id), one write on, its spec as it was: a pause, a
    # resume, a completion. A replace writes the user's spec as sent (review: an http target's
    # field went into the sqs target that replaced it, and a re-created job took a deleted one's).
    if found is None or (found[0] + 1, found[1], found[2]) != (job.version, job.created_at, job.spec_since):
        return document
    data = json.loads(document)
    for path, value in found[3]:
        place: Any = data
        for key in path[:-1]:
            if (isinstance(place, dict) and key in place) or (
                isinstance(place, list) and isinstance(key, int) and 0 <= key < len(place)
            ):
                place = place[key]
            else:
                place = None
                break
        if isinstance(place, dict) and path[-1] not in place:
            place[path[-1]] = value
    return json.dumps(data, separators=(",", ":"))
