"""QA22: a webhook job's signing secret is rotated from Python and from the command
(``POST /v1/jobs/{id}/rotate-secret``: neither had a way to, so a leaked secret meant curl with a
SigV4 signature). Against the API handler served on loopback (the fixtures of test_cli_api.py).
"""

from __future__ import annotations

import json

import pytest
from api_harness import api as api  # the fixture
from test_cli_api import Served, create, run
from test_cli_api import served as served  # the fixture

from punctual.execution import default_signing_secrets
from punctual.runtime.settings import Settings
from punctual_cli.client import ApiError, PunctualClient


def test_the_client_rotates_and_drops_the_previous_secret(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    job = create(capsys, "--no-name-check")
    client = PunctualClient(served.url)

    rotated = client.rotate_secret(job["id"])
    assert (
        rotated["signing_secret"].startswith("whsec_") and rotated["signing_secret"] != job["signing_secret"]
    )
    assert rotated["version"] == job["version"] + 1
    with pytest.raises(ApiError) as stale:  # guarded by the version read before
        client.rotate_secret(job["id"], if_match=job["version"])
    assert stale.value.status == 412
    dropped = client.rotate_secret(job["id"], drop_previous=True, if_match=rotated["version"])
    assert dropped["signing_secret"] is None and dropped["version"] == rotated["version"] + 1
    sent = [e for e in served.events if e["path"].endswith("/rotate-secret")]
    assert [(e.get("queryStringParameters") or {}).get("drop_previous") for e in sent] == [None, None, "true"]


def test_the_command_rotates_shows_the_secret_once_and_exits_as_documented(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    job = create(capsys, "--no-name-check")

    code, out, err = run(capsys, "jobs", "rotate-secret", job["id"])
    assert code == 0 and err == "", err
    secret = out.split("store it now):\n", 1)[1].strip()
    assert secret.startswith("whsec_") and secret != job["signing_secret"] and "previous one" in out
    code, out, err = run(capsys, "jobs", "rotate-secret", job["id"], "--drop-previous", "-o", "json")
    assert code == 0 and json.loads(out)["signing_secret"] is None and json.loads(out)["version"] == 3
    code, out, err = run(capsys, "jobs", "rotate-secret", job["id"], "--if-match", "1")
    assert code == 1 and out == "" and err.count("\n") == 1 and "412" in err, err
    code, out, err = run(capsys, "jobs", "rotate-secret", "missing")
    assert code == 1 and err.startswith("punctual: error: 404 "), err
    not_http = run(capsys, "jobs", "create", "--schedule", "rate(1 hour)", "--sqs-arn",
                   "arn:aws:sqs:us-east-1:123456789012:q", "--no-name-check", "-o", "json")[1]  # fmt: skip
    code, out, err = run(capsys, "jobs", "rotate-secret", json.loads(not_http)["id"])
    assert code == 2 and out == "" and "422" in err, err


def test_an_update_that_gives_a_job_its_first_webhook_shows_its_secret(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    # QA24: the replace answered the job's first signing secret, once, and the command printed only
    # "updated job ... to version 2": the secret was never shown, and every call to the new webhook
    # was signed with a secret its receiver could not have (rotate-secret was the only way out)
    made = run(capsys, "jobs", "create", "--schedule", "rate(1 hour)", "--sqs-arn",
               "arn:aws:sqs:us-east-1:123456789012:q", "--no-name-check", "-o", "json")[1]  # fmt: skip
    job_id = json.loads(made)["id"]

    code, out, err = run(capsys, "jobs", "update", job_id, "--http-url", "https://hooks.example.com/run")

    assert code == 0 and err == "", err
    assert out.startswith(f"updated job {job_id} to version 2\n"), out
    secret = out.split("store it now):\n", 1)[1].strip()
    job = served.api.store.get_job("default", job_id)  # the CLI's tenant in local mode
    assert job is not None and default_signing_secrets(Settings.from_env())(job) == (secret,)
    # an update that changes nothing about the webhook shows no secret
    code, out, err = run(capsys, "jobs", "update", job_id, "--schedule", "rate(2 hours)")
    assert code == 0 and out == f"updated job {job_id} to version 3\n", out
