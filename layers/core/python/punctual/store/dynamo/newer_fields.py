"""Fields a newer version wrote into a job's document, kept across this version's writes of it.

After a rollback this version reads such a document without what it does not know
(:func:`punctual.models.base.without_unknown_fields`). A write of that job by this version (a
pause, a resume, a completion, a replace) would then drop those fields for good, and the newer
version, rolled forward again, would find its job changed (review: one pause lost a target's
signature scheme and a retry policy's statuses). So the read keeps them here, by tenant and job,
with the version read, and the job's next write (its version one more) puts them back where their
place still exists in the new document. A process that did not read the job itself (another
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

_kept: OrderedDict[tuple[str, str], tuple[int, Removed]] = OrderedDict()
_lock = threading.Lock()


def keep(job: Job, removed: Removed) -> None:
    """The fields ``job``'s document held that this version does not know (read at its version)."""
    if not removed:
        return
    with _lock:
        _kept[(job.tenant, job.id)] = (job.version, removed)
        _kept.move_to_end((job.tenant, job.id))
        while len(_kept) > MAX_KEPT:
            _kept.popitem(last=False)


def with_kept(job: Job, document: str) -> str:
    """``document`` (``job``'s, to be written) with the fields kept for the job at the version
    before this one, each where its place still is; as it is otherwise (the usual case: no read)."""
    if not _kept:
        return document
    found = _kept.get((job.tenant, job.id))
    if found is None or found[0] + 1 != job.version:
        return document
    data = json.loads(document)
    for path, value in found[1]:
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
