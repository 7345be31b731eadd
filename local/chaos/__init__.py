"""Chaos: prove exactly one execution per slot while processes die, deliveries repeat, clocks skew.

A Jepsen-style check of local mode, in four parts:

* :mod:`local.chaos.workload` registers a seeded mix of jobs (``rate(1..10 seconds)``, cron
  every minute, one-time ``at(...)``, jobs that fail N times then succeed, jobs meant to
  fail, ``delay(...)``, two-parent ``after(A, B)``, long ECS runs) whose webhooks go to the
  local receiver, which records every request's ``Idempotency-Key``, attempt and arrival;
* :mod:`local.chaos.faults.driver` injects seeded faults while they fire: ``kill -9`` of
  pollers and workers (mid-batch and mid-run too; the poller mid-minute at least once), a
  second poller on the same shard group with a skewed clock, duplicated SQS deliveries (old
  bodies re-sent with fresh dedup ids), AWS throttling in the processes it starts,
  pause/resume/update of jobs;
* :mod:`local.chaos.ledger` writes down what was asked of the system (every API call, when
  it was sent and answered, what it returned) and derives from the schedules which slots
  were owed and which were optional;
* :mod:`local.chaos.verdict` compares that with the receiver's records and the stored
  executions, measures each slot's fire delay (instant to first request), and prints one
  line (``slots N, executed once N, duplicates 0, missed 0, early 0, faults F, fire delay
  p50 X s p99 Y s max Z s (N slots)``), exiting non-zero on any violation, each named, a
  p99 fire delay over 10 s (``--max-p99-delay-s``) included.

``python -m local.chaos run --minutes 10`` (``make chaos``) runs it; ``verdict RUN_DIR``
judges a finished run again from its files.
"""
