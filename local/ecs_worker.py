"""The ``ecs-worker`` component: :mod:`punctual.execution.worker_service` as it is, on the long queue.

Its environment is the ECS task definition's in the template, pointed at the local
resources; the drain grace is shortened (a terminal's Ctrl-C should not wait 90 s) and
the long poll kept short so that a stop is prompt.
"""

from __future__ import annotations

import logging
import os
import threading

from local.component import prepare, wait_for_deployment
from local.config import LocalConfig

log = logging.getLogger("local.ecs")

LOCAL_GRACE_S = "10"
LOCAL_WAIT_S = "2"


def run(config: LocalConfig, stop: threading.Event) -> None:
    deployment = wait_for_deployment(config, stop=stop)
    prepare(config, deployment.ecs_environment or deployment.environment)
    os.environ["PUNCTUAL_WORKER_GRACE_S"] = LOCAL_GRACE_S
    os.environ.setdefault("PUNCTUAL_WORKER_WAIT_S", LOCAL_WAIT_S)
    from punctual.execution import worker_service

    # worker_service installs its own SIGTERM/SIGINT handlers (drain, then exit 0).
    # Ours stays reachable through `stop` only when the supervisor disappears.
    watcher = threading.Thread(target=_stop_on, args=(stop,), daemon=True)
    watcher.start()
    worker_service.main([])


def _stop_on(stop: threading.Event) -> None:
    import signal

    stop.wait()
    os.kill(os.getpid(), signal.SIGTERM)  # the service drains as ECS would stop it
