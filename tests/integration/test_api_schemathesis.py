"""Schemathesis against the local API, over HTTP, with the committed openapi.json.

The API handler is served by :class:`~local.api_gateway.LocalApiServer` (the server
of local mode) on a free port, over moto, with a SigV4 caller (Alice) in every event as
API Gateway would put it. The schemathesis command runs every phase (examples, coverage,
fuzzing, and stateful sequences that follow the document's links), positive and negative
data, and every check but ``ignored_auth`` (SigV4 is API Gateway's, before the function
runs). The seed and the example counts are fixed and no example database is kept, so a run
is repeatable and takes well under two minutes (30-45 s on two cores shared with other
work); any failure fails the test with schemathesis' own report.

``schemathesis.toml`` beside this file says why positive data may be refused with a 4xx, and
gives the stateful phase more examples.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from api_harness import ACCOUNT, ALICE, ALICE_ID, ROOT, ApiClient, job_spec
from api_harness import api as api  # the fixture

from local.api_gateway import LocalApiServer
from punctual.api import wiring

CONFIG = Path(__file__).with_name("schemathesis.toml")
SEED = 1717
MAX_EXAMPLES = 25
RUN_TIMEOUT_S = 600  # a hang fails the test; the run itself takes 30-45 s on two busy cores


def test_the_local_api_conforms_to_its_openapi_document(
    api: ApiClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the API without the per-tenant request limit (schemathesis sends ~3,000 requests in
    # under a minute, as one tenant; the limit's 429 is tested in test_api_security.py)
    monkeypatch.setenv("PUNCTUAL_API_REQUESTS_PER_MINUTE_PER_TENANT", "0")
    wiring.use_services(None)  # rebuilt from the variables on the next request
    # on a free loopback port, with one job so that job routes have one to find
    identity = {"userArn": ALICE, "user": ALICE_ID, "caller": ALICE_ID, "accountId": ACCOUNT}
    with LocalApiServer(api.handler.handler, identity=identity) as server:
        api.create(job_spec(name="existing"))
        # When schemathesis runs every phase and check against it
        command = [
            sys.executable, "-m", "schemathesis.cli",  # the schemathesis command of this interpreter
            "--config-file", str(CONFIG),
            "run", str(ROOT / "openapi.json"),
            "--url", server.url,
            "--phases", "examples,coverage,fuzzing,stateful",
            "--mode", "all",
            "--checks", "all",
            "--exclude-checks", "ignored_auth",
            # SigV4 is checked by API Gateway before the function runs: no Authorization to vary.
            "--generation-with-security-parameters", "false",
            "--max-examples", str(MAX_EXAMPLES),
            "--seed", str(SEED),
            "--generation-database", "none",  # nothing carried over from an earlier run
            # One worker: with two, hypothesis' lambda-description cache (an OrderedDict LRU shared
            # by the threads, not thread safe) now and then raised a KeyError holding a module's
            # source lines, which failed a landing (CI, 2026-12-04).
            "--workers", "1",
            "--no-color",
            "--report", "json,har",
            "--report-json-path", str(tmp_path / "report.json"),
            "--report-har-path", str(tmp_path / "requests.har"),
        ]  # fmt: skip
        env = {**os.environ, "SCHEMATHESIS_HOOKS": "", "NO_COLOR": "1"}
        done = subprocess.run(  # in tmp_path: schemathesis keeps a cache in its working directory
            command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env, check=False, cwd=tmp_path
        )
    (tmp_path / "schemathesis.out").write_text(done.stdout + done.stderr)
    # Then nothing fails
    assert done.returncode == 0, done.stdout[-20000:] + done.stderr[-5000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report, "schemathesis wrote no report"


def test_the_document_is_the_one_the_api_serves(api: ApiClient) -> None:
    served = api.call("GET", "/v1/openapi.json").body
    # The served document names the server it was reached at; the committed one, local mode.
    assert {**served, "servers": []} == {**json.loads((ROOT / "openapi.json").read_text()), "servers": []}
    # 10, alerts (1), calendars (2), backfills (2), job batches (1), a job's upcoming slots (1)
    assert len(served["paths"]) == 17
