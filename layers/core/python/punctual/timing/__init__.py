"""The time machinery: when a job's slots are, and where each instant waits as a timer row.

Pure functions of a job, a schedule and ``now``; nothing here reads a clock or a table.

* :mod:`~punctual.timing.schedules`: cron, rate, at, fixed delay, after; zones, DST and jitter.
* :mod:`~punctual.timing.slots`: a job's next slot and which slots to release.
* :mod:`~punctual.timing.missed_ranges`: long runs of missed slots, counted without a list.
* :mod:`~punctual.timing.timers`: timer rows, their lanes and shard hashing.
* :mod:`~punctual.timing.retries`: backoff instants of failed attempts.
* :mod:`~punctual.timing.instants`: UTC instants as text.
"""
