"""The ``api`` component: the API Lambda (``functions/api/handler.py``) behind a loopback HTTP server.

:mod:`local.api_gateway` turns each request into the API Gateway REST proxy event
AWS would send, calls the handler, and turns its reply back into HTTP. The tenant is the
``X-Punctual-Tenant`` header (``PUNCTUAL_LOCAL_MODE=1``; ``default`` when absent). The same
port serves the console page at ``/console`` (:mod:`local.console`).
"""

from __future__ import annotations

import logging
import threading

from local.component import load_handler, prepare
from local.config import LOOPBACK, LocalConfig, LocalModeError, port_in_use

log = logging.getLogger("local.api")


def run(config: LocalConfig, stop: threading.Event, name: str = "api") -> None:
    deployment = prepare(config, stop=stop)
    shared = config.api_processes > 1
    if not shared and port_in_use(config.api_port):
        raise LocalModeError(f"port {config.api_port} is taken: choose another with --api-port")
    from local.api_gateway import LocalApiServer

    if shared:  # several "containers" on one port: the kernel spreads the connections
        import http.server

        http.server.ThreadingHTTPServer.allow_reuse_port = True

    from local.console import with_console

    handler = load_handler("api")
    server = LocalApiServer(with_console(handler.handler), host=LOOPBACK, port=config.api_port).start()
    log.info("%s on %s (table %s)", name, server.url, deployment.table_name)
    try:
        stop.wait()
    finally:
        server.stop()
