"""Rotating a webhook signing secret: the new one shown once, both signing until the old is dropped."""

from __future__ import annotations

import time

from api_harness import ALICE_ID, http_spec, job_spec
from api_harness import api as api  # the fixture
from standardwebhooks.webhooks import Webhook

from punctual.delivery.targets.webhooks.signing import sign_webhook
from punctual.execution import default_signing_secrets
from punctual.runtime.settings import Settings


def test_rotation_keeps_the_previous_secret_signing_until_dropped(api) -> None:  # type: ignore[no-untyped-def]
    # Given an HTTP job and its first secret
    created = api.create(http_spec())
    job_id, first = created["id"], created["signing_secret"]
    # When its secret is rotated
    rotated = api.call("POST", f"/v1/jobs/{job_id}/rotate-secret")
    second = rotated.body["signing_secret"]
    # Then the new secret is shown once, the version is one more (the spec is the same), and the
    # worker signs with both: a receiver holding either secret verifies the request
    assert rotated.status == 200 and second.startswith("whsec_") and second != first
    assert rotated.body["version"] == created["version"] + 1
    assert rotated.headers["ETag"] == f'"{created["version"] + 1}"'
    # A second rotation guarded by the version read before the first is refused (QA: both passed,
    # and a race of two left the secret the first one handed out signing nothing)
    again = api.call(
        "POST", f"/v1/jobs/{job_id}/rotate-secret", headers={"If-Match": f'"{created["version"]}"'}
    )
    assert again.status == 412
    assert "signing_secret" not in api.call("GET", f"/v1/jobs/{job_id}").body
    secrets_of = default_signing_secrets(Settings.from_env())
    job = api.store.get_job(ALICE_ID, job_id)
    assert secrets_of(job) == (second, first)
    body, msg_id, stamp = b'{"k":1}', f"{job_id}:slot", int(time.time())
    signature = sign_webhook(msg_id, stamp, body, secrets_of(job))
    headers = {"webhook-id": msg_id, "webhook-timestamp": str(stamp), "webhook-signature": signature}
    for secret in (first, second):
        Webhook(secret).verify(body, headers)  # raises unless a signature matches this secret
    # When the previous one is dropped, only the new one signs, and no secret is shown
    dropped = api.call("POST", f"/v1/jobs/{job_id}/rotate-secret?drop_previous=true")
    assert dropped.status == 200 and dropped.body["signing_secret"] is None
    assert secrets_of(api.store.get_job(ALICE_ID, job_id)) == (second,)


def test_rotation_errors(api) -> None:  # type: ignore[no-untyped-def]
    not_http = api.create(job_spec())
    assert api.call("POST", f"/v1/jobs/{not_http['id']}/rotate-secret").status == 422
    assert api.call("POST", "/v1/jobs/missing/rotate-secret").status == 404
    job = api.create(http_spec())
    stale = api.call("POST", f"/v1/jobs/{job['id']}/rotate-secret", headers={"If-Match": '"9"'})
    assert stale.status == 412


def test_the_operator_allow_list_reaches_registration(api, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from punctual.api import wiring

    loopback = http_spec(target={"type": "http", "url": "http://127.0.0.1:9000/hook"})
    assert api.call("POST", "/v1/jobs", loopback).status == 422  # refused by default
    monkeypatch.setenv("PUNCTUAL_TARGET_ALLOW_CIDRS", "127.0.0.0/8")
    wiring.use_services(None)  # rebuilt from the variables on the next request
    assert api.call("POST", "/v1/jobs", loopback).status == 201
