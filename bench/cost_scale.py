"""What the cost bench's small run says about 10,000 triggers a second: per-chunk requests.

The poller releases its due timers in chunks of up to ``punctual.polling.release.CHUNK`` (100,
BatchGetItem's limit): one job read per chunk, and one minute-load ledger write per chunk and
minute it forecasts (``punctual.load_forecast``). The cost run's few triggers a second make small
chunks; at 10,000/s every chunk is full, so what is paid per chunk is paid per 100 triggers.
"""

from __future__ import annotations

from collections.abc import Mapping

from awsmeter import Tally


def per_full_chunk(added: Mapping[tuple[str, str, str], Tally], triggers: int) -> float:
    """How much of a per-chunk request a trigger pays at 10,000/s, relative to this run: the run's
    chunks (its poller job reads, one per chunk) against one per ``CHUNK`` triggers."""
    from punctual.polling.release import CHUNK

    reads = added.get(("poller", "dynamodb.BatchGetItem", "job"))
    if reads is None or reads.calls <= 0 or triggers <= 0:
        return 1.0
    return min(1.0, triggers / CHUNK / reads.calls)
