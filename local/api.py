"""The ``api`` component: the API Lambda (``functions/api/handler.py``) behind a loopback HTTP server.

:mod:`punctual.api.local_server` turns each request into the API Gateway REST proxy event
AWS would send, calls the handler, and turns its reply back into HTTP. The tenant is the
``X-Punctual-Tenant`` header (``PUNCTUAL_LOCAL_MODE=1``; ``default`` when absent).
"""

from __future__ import annotations

import logging
import threading

from local.component import load_handler, prepare
from local.config import LOOPBACK, LocalConfig, LocalModeError, port_in_use

log = logging.getLogger("local.api")


def _allow_loopback_targets() -> None:
    """Build the API's services now, with ``PUNCTUAL_TARGET_ALLOW_CIDRS`` reaching the job service.

    ``punctual.api.wiring.build_services`` does not hand ``settings.target_allow_cidrs`` to
    :class:`~punctual.jobs.JobService` (whose registration check then refuses the demo's
    loopback receiver even though the workers would call it). Until it does, local mode
    installs services that do, through the module's own ``use_services`` hook.
    """
    import boto3

    from punctual.api import wiring
    from punctual.settings import Settings

    settings = Settings.from_env()
    services = wiring.build_services(settings, boto3.client("dynamodb"), boto3.client("sqs"))
    if not services.jobs.allow_cidrs:
        services.jobs.allow_cidrs = tuple(settings.target_allow_cidrs)
    wiring.use_services(services)


def run(config: LocalConfig, stop: threading.Event) -> None:
    deployment = prepare(config)
    if port_in_use(config.api_port):
        raise LocalModeError(f"port {config.api_port} is taken: choose another with --api-port")
    from punctual.api.local_server import LocalApiServer

    handler = load_handler("api")
    _allow_loopback_targets()
    server = LocalApiServer(handler.handler, host=LOOPBACK, port=config.api_port).start()
    log.info("API on %s (table %s)", server.url, deployment.table_name)
    try:
        stop.wait()
    finally:
        server.stop()
