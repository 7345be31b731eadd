"""Two gaps QA21 found in what a tenant may name:

* underscore spellings of the reserved webhook headers (``Punctual_Tenant``, ``Webhook_Signature``):
  a CGI or WSGI receiver reads them as the ``-`` names, and joined the job's value to Punctual's
  (``HTTP_PUNCTUAL_TENANT`` read ``VICTIM,ATTACKER``). Refused at registration; a stored one is
  read, and never sent;
* the scheduler's own IAM roles named in another case: IAM does not tell role names apart by case.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from pydantic import ValidationError

from factories import spec
from punctual.delivery.targets.base import SlotContext
from punctual.delivery.targets.webhooks.adapter import HttpTargetAdapter
from punctual.dispatch.queues import MemoryQueues
from punctual.models import ACCEPTED, HttpTarget
from punctual.runtime.clock import ManualClock
from punctual.security.ownership import OwnResources
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerLayout
from punctual.usecases.job_errors import InvalidJobError
from punctual.usecases.jobs import JobService, QueueRouting

SPOOFS = ["Punctual_Tenant", "Webhook_Signature", "Webhook_Id", "Idempotency_Key", "Punctual_Fencing_Token"]
HOOK = "https://hooks.example.com/run"


@pytest.mark.parametrize("name", SPOOFS[1:])
def test_an_underscore_spelling_of_a_reserved_header_is_refused_by_name(name: str) -> None:
    with pytest.raises(ValidationError, match=f"header '{name}' is reserved"):
        HttpTarget.model_validate({"type": "http", "url": HOOK, "headers": {name: "VICTIM"}})
    stored = HttpTarget.model_validate(
        {"type": "http", "url": HOOK, "headers": {name: "x"}}, context=ACCEPTED
    )
    assert stored.headers == {name: "x"}  # written before the rule: still read
    assert HttpTarget.model_validate({"type": "http", "url": HOOK, "headers": {"X_Team": "data"}}).headers


def test_an_underscore_spelling_of_the_tenant_header_is_refused_at_registration() -> None:
    clock = ManualClock(datetime(2026, 11, 30, tzinfo=UTC))
    jobs = JobService(
        MemoryStore(), MemoryQueues(now=clock.now), clock, TimerLayout(), QueueRouting(("q",), ())
    )
    target = {"type": "http", "url": HOOK, "headers": {"Punctual_Tenant": "VICTIM"}}
    with pytest.raises(InvalidJobError, match="'Punctual_Tenant' is reserved"):
        jobs.register("default", spec("rate(1 hour)", target=target))


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, dict[str, str]]]:
    """A WSGI receiver on a free loopback port: its URL, and the HTTP_* names of the last request."""
    seen: dict[str, str] = {}

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.clear()
        seen.update({k: v for k, v in environ.items() if k.startswith("HTTP_")})
        start_response("200 OK", [("Content-Length", "0")])
        return [b""]

    server = make_server("127.0.0.1", 0, app, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_stored_underscore_header_is_not_sent(receiver: tuple[str, dict[str, str]]) -> None:
    url, seen = receiver
    headers = {"Punctual_Tenant": "VICTIM", "Webhook_Id": "forged", "X_Team": "data"}
    target = SimpleNamespace(url=url, method="POST", headers=headers, follow_redirects=False)
    ctx = SlotContext(
        job_id="j1",
        tenant="ATTACKER",
        slot="2026-01-01T00:00:00Z",
        scheduled_at=datetime(2026, 1, 1, tzinfo=UTC),
        attempt=1,
        timeout_s=5,
    )
    result = HttpTargetAdapter(["127.0.0.1/32"]).invoke(target, {"a": 1}, ctx)
    assert result.outcome.value == "succeeded", result
    assert seen["HTTP_PUNCTUAL_TENANT"] == "ATTACKER" and "forged" not in seen.get("HTTP_WEBHOOK_ID", "")
    assert seen["HTTP_X_TEAM"] == "data"  # a header of the job's own is sent


def test_an_own_role_named_in_another_case_is_own() -> None:
    own = OwnResources.of(["arn:aws:iam::123456789012:role/PunctualTargetRole"])
    for spelt in (
        "PunctualTargetRole",
        "punctualtargetrole",
        "PUNCTUALTARGETROLE",
        "path/x/punctualTargetRole",
    ):
        assert own.owns(f"arn:aws:iam::123456789012:role/{spelt}"), spelt
    assert not own.owns("arn:aws:iam::123456789012:role/PunctualTargetRole2")
    assert not own.owns("arn:aws:iam::210987654321:role/PunctualTargetRole")  # another account's
