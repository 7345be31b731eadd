"""One stalled AWS call: a request whose response never comes (a black-holed TCP response).

``LOCAL_CHAOS_STALL='{"component": "poller", "service": "dynamodb", "operation": "Query",
"at": <unix time>, "hold_s": 40}'`` in local mode's environment (it is passed to its
components) makes the first matching call that component makes at or after ``at`` (and once
the file ``armed_by`` exists, when given; made by a thread whose name starts with ``thread``,
when given: ``poller-`` is a minute's poller, not its planning or scaling) hang: the
client waits as it would for an answer that does not come, its own ``read_timeout`` (then
botocore retries, as after a real read timeout), or ``hold_s`` if that is shorter (then the
request goes on). Once per run: the first process to stall creates ``<marker>`` (``marker``:
a path; default ``/tmp/local-chaos-stall-<at>``), so a restarted component does not stall again.

A ``before-send`` hook, as :mod:`local.chaos.faults.throttle`'s: the call never reaches moto (the
request was lost on its way). With ``"applied": true`` the request reaches moto and is applied,
and its answer is the one lost: a ``needs-retry`` hook, first in line, waits the read timeout
and has botocore send the call again, as it does after a read timeout (a conditional write then
finds itself applied).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

STALL_ENV = "LOCAL_CHAOS_STALL"

log = logging.getLogger("local.chaos.stall")


class Stall:
    """The hook: stalls the first matching call at or after ``at`` (see the module docstring)."""

    def __init__(self, spec: dict[str, Any], read_timeout_s: float) -> None:
        self.operation = str(spec["operation"])
        self.at = float(spec["at"])
        self.hold_s = float(spec.get("hold_s", 40))
        self.marker = Path(str(spec.get("marker") or f"/tmp/local-chaos-stall-{int(self.at)}"))
        self.read_timeout_s = read_timeout_s
        self.armed_by = Path(str(spec["armed_by"])) if spec.get("armed_by") else None
        self.thread = str(spec.get("thread", ""))

    def _now(self, event_name: str) -> bool:
        """Whether this call is the one that stalls (at most one per run)."""
        if time.time() < self.at or not event_name.endswith(f".{self.operation}"):
            return False
        if self.armed_by is not None and not self.armed_by.exists():
            return False
        if not threading.current_thread().name.startswith(self.thread):
            return False
        try:
            self.marker.touch(exist_ok=False)  # once per run, whichever process comes first
        except FileExistsError:
            return False
        return True

    def __call__(self, request: Any, **kwargs: Any) -> None:
        from botocore.exceptions import ReadTimeoutError

        if not self._now(kwargs.get("event_name", "")):
            return
        waits = min(self.hold_s, self.read_timeout_s)
        log.warning("chaos: %s stalls %.0f s (timeout %.0f s)", self.operation, waits, self.read_timeout_s)
        time.sleep(waits)
        if self.hold_s >= self.read_timeout_s:
            raise ReadTimeoutError(endpoint_url=request.url)

    def answer_lost(self, response: Any = None, **kwargs: Any) -> float | None:
        """``needs-retry``: an applied call's answer lost; sent again after the read timeout."""
        if response is None or not self._now(kwargs.get("event_name", "")):
            return None
        log.warning("chaos: %s applied, its answer lost (%.0f s)", self.operation, self.read_timeout_s)
        time.sleep(self.read_timeout_s)
        return 0.0


def install_from_env(component: str) -> bool:
    """Stall ``component``'s clients as :data:`STALL_ENV` asks; return whether it did."""
    text = os.environ.get(STALL_ENV, "")
    if not text:
        return False
    spec = json.loads(text)
    if spec.get("component", "poller") != component:
        return False
    from botocore.session import Session

    original = Session.create_client
    service = str(spec.get("service", "dynamodb"))

    def create_client(self: Session, service_name: str, *args: Any, **kwargs: Any) -> Any:
        client = original(self, service_name, *args, **kwargs)
        if service_name == service:
            hook = Stall(spec, float(client.meta.config.read_timeout))
            model = client.meta.service_model
            if spec.get("applied"):
                retry = f"needs-retry.{model.service_id.hyphenize()}.{hook.operation}"
                client.meta.events.register_first(retry, hook.answer_lost)
            else:
                client.meta.events.register(f"before-send.{model.endpoint_prefix}", hook)
        return client

    Session.create_client = create_client
    return True
