"""What the cost bench's small run says about 10,000 triggers a second: per-chunk requests.

The poller releases its due timers in chunks of up to ``punctual.dispatch.polling.release.CHUNK`` (100,
BatchGetItem's limit): one job read per chunk, and one minute-load ledger write per chunk and
minute it forecasts (``punctual.dispatch.load_forecast``). The cost run's few triggers a second make small
chunks; at 10,000/s every chunk is full, so what is paid per chunk is paid per 100 triggers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from awsmeter import Tally


def per_full_chunk(added: Mapping[tuple[str, str, str], Tally], triggers: int) -> float:
    """How much of a per-chunk request a trigger pays at 10,000/s, relative to this run: the run's
    chunks (its poller job reads, one per chunk) against one per ``CHUNK`` triggers."""
    from punctual.dispatch.polling.release import CHUNK

    reads = added.get(("poller", "dynamodb.BatchGetItem", "job"))
    if reads is None or reads.calls <= 0 or triggers <= 0:
        return 1.0
    return float(min(1.0, triggers / CHUNK / reads.calls))


LEASE_CALL = "sqs.ChangeMessageVisibilityBatch"  # the worker's lease on arrival: one per ten records


def side_by_side_ms(
    record_io_ms: float, cpu_ms: float, batch: float, overhead_ms: float, lease_ms: float
) -> float:
    """Billed worker Lambda milliseconds per trigger, for a batch of ``batch`` records.

    The records of different message groups run side by side, one thread each, at most ten
    (``punctual.execution.batch``); at 10,000/s every record is a group of its own (one per slot).
    One process runs their CPU one after another, while their requests overlap. So a batch lasts
    its overhead, its lease call, every record's CPU, and one record's requests per ten records:
    an upper bound, as it overlaps no record's CPU with another's requests.
    """
    from punctual.execution.batch import MAX_GROUPS_AT_ONCE

    waves = math.ceil(batch / MAX_GROUPS_AT_ONCE)
    return cpu_ms + (overhead_ms + lease_ms + record_io_ms * waves) / batch
