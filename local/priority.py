"""What stands for the world outside the deployment runs ahead of the deployment's processes.

In the cloud, DynamoDB and SQS run on AWS's machines and a tenant's webhook on the tenant's: a
poller busy releasing a burst slows neither a worker's claim nor the target's answer. In local
mode they share this machine's two cores with the deployment's processes: the embedded AWS (moto,
whose one interpreter lock serves every request) and the webhook receiver (which stamps each
request's arrival: the fire delay benchmarks and chaos measure). At a burst's instant the two
pollers of a group (each releasing every slot) and the workers took the cores, moto got about a
third of them, and a claim's one conditional put waited 50 to 400 ms for it (bench/fairness.py
with --log-level DEBUG). Ahead of them, moto and the receiver run when they have work, as AWS
and a tenant's endpoint would; together they need about one core at a burst's peak.

Linux sets a nice value per thread and a new thread inherits its creator's: :func:`run_ahead`,
called before a server starts, covers every request it serves. Lowering a nice value needs
CAP_SYS_NICE: without it the component keeps the default (said once in its log).
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("local")

# The nice value of the stand-ins for the world outside (the deployment's processes run at 0).
OUTSIDE_PRIORITY = -5


def run_ahead(what: str) -> None:
    """Give this thread, and every thread it starts from now on, :data:`OUTSIDE_PRIORITY`."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, OUTSIDE_PRIORITY)
    except OSError as exc:
        log.info("%s runs at the default priority (%s)", what, exc.strerror or exc)
