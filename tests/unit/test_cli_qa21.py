"""QA21 fixes of the ``punctual`` command, against a small fake API served on loopback (the real
HTTP library encodes the requests, as it does for the real API).

1. ``jobs update --http-url/--lambda-arn/--sqs-arn`` changed what the flag names and dropped the
   rest of the target (a webhook's headers, its credential among them, method and rate budget; a
   Lambda's ``role_arn`` and invocation type): a flag of the target's own type now merges into it,
   one of another type makes a new target of that type.
2. Input that is bad ended as ``internal error`` (exit 1): a payload or file nested too deeply
   (RecursionError), a tenant or idempotency key an HTTP header cannot carry (UnicodeEncodeError,
   ValueError), and alike (an endpoint, a signing region, a URL parameter). Each is now exit 2
   with one line naming it, and nothing is sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from punctual_cli import cli
from punctual_cli.client import ClientInputError, PunctualClient

HOOK = "https://hooks.example.com"
FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:"
QUEUE = "arn:aws:sqs:us-east-1:123456789012:"
ROLE = "arn:aws:iam::123456789012:role/exec"
BASE = ["--name", "x", "--schedule", "rate(1 hour)", "--http-url", f"{HOOK}/p"]


@dataclass
class FakeApi:
    """What the fake API holds: its jobs, and every request it was sent."""

    url: str = ""
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, str], Any]] = field(default_factory=list)

    def seed(self, target: dict[str, Any]) -> str:
        self.jobs["j1"] = {
            "id": "j1",
            "name": "job",
            "state": "ENABLED",
            "schedule": "rate(1 hour)",
            "timezone": "UTC",
            "target": target,
            "payload": None,
            "version": 1,
        }
        return "j1"

    def sent(self, method: str) -> list[Any]:
        return [body for verb, _, _, body in self.requests if verb == method]


def _handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body: Any = json.loads(self.rfile.read(length)) if length else None
            api.requests.append((self.command, self.path, dict(self.headers.items()), body))
            path = self.path.split("?")[0]
            parts = path.strip("/").split("/")
            if self.command == "GET" and path == "/v1/jobs":
                self._answer(200, {"items": list(api.jobs.values()), "next_token": None})
            elif self.command == "POST" and path == "/v1/jobs":
                self._answer(201, {**body, "id": "j9", "state": "ENABLED", "version": 1})
            elif parts[:2] == ["v1", "jobs"] and len(parts) == 3 and parts[2] in api.jobs:
                job = api.jobs[parts[2]]
                if self.command == "PUT":
                    job = api.jobs[parts[2]] = {
                        **body,
                        "id": parts[2],
                        "state": job["state"],
                        "version": job["version"] + 1,
                    }
                self._answer(200, job)
            elif parts[:2] == ["v1", "calendars"] and self.command == "PUT":
                self._answer(200, {**body, "name": parts[2], "version": 1})
            else:
                self._answer(404, {"title": "Not found", "detail": path})

        do_GET = do_PUT = do_POST = do_DELETE = _serve

    return Handler


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApi]:
    fake = FakeApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("PUNCTUAL_ENDPOINT", fake.url)
    monkeypatch.setenv("PUNCTUAL_TENANT", "alice")
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def refused(capsys: pytest.CaptureFixture[str], api: FakeApi, *argv: str) -> str:
    """Run ``argv``: exit 2, one ``punctual: error:`` line (not an internal error), nothing sent."""
    code, out, err = run(capsys, *argv)
    assert "internal error" not in err, err
    assert code == 2 and out == "" and err.startswith("punctual: error: ") and err.count("\n") == 1, (
        code,
        err,
    )
    assert api.requests == [], api.requests
    return err


def updated_target(capsys: pytest.CaptureFixture[str], api: FakeApi, *flags: str) -> dict[str, Any]:
    code, _, err = run(capsys, "jobs", "update", "j1", *flags)
    assert code == 0, err
    (body,) = api.sent("PUT")
    target: dict[str, Any] = body["target"]
    return target


# -- 1. an update's target flag merges into a target of its type ------------------------------


WEBHOOK = {
    "type": "http",
    "url": f"{HOOK}/old",
    "method": "PUT",
    "headers": {"Authorization": "Bearer s3cr3t", "X-Team": "ops"},
    "rate_budget_per_second": 3,
    "follow_redirects": False,
}


def test_a_new_url_keeps_the_webhooks_headers_method_and_budget(
    capsys: pytest.CaptureFixture[str], api: FakeApi
) -> None:
    api.seed(dict(WEBHOOK))
    target = updated_target(capsys, api, "--http-url", f"{HOOK}/new")
    assert target == {**WEBHOOK, "url": f"{HOOK}/new"}


def test_a_new_url_and_method_change_both_and_keep_the_rest(
    capsys: pytest.CaptureFixture[str], api: FakeApi
) -> None:
    api.seed(dict(WEBHOOK))
    target = updated_target(capsys, api, "--http-url", f"{HOOK}/new", "--http-method", "PATCH")
    assert target == {**WEBHOOK, "url": f"{HOOK}/new", "method": "PATCH"}


def test_a_new_function_keeps_its_role_and_invocation_type(
    capsys: pytest.CaptureFixture[str], api: FakeApi
) -> None:
    function = {
        "type": "lambda",
        "function_arn": f"{FUNCTION}f",
        "invocation_type": "Event",
        "role_arn": ROLE,
    }
    api.seed(dict(function))
    target = updated_target(capsys, api, "--lambda-arn", f"{FUNCTION}g")
    assert target == {**function, "function_arn": f"{FUNCTION}g"}


def test_a_new_queue_keeps_its_role_group_and_budget(
    capsys: pytest.CaptureFixture[str], api: FakeApi
) -> None:
    queue = {
        "type": "sqs",
        "queue_arn": f"{QUEUE}a.fifo",
        "message_group_id": "g1",
        "role_arn": ROLE,
        "rate_budget_per_second": 5,
    }
    api.seed(dict(queue))
    target = updated_target(capsys, api, "--sqs-arn", f"{QUEUE}b.fifo")
    assert target == {**queue, "queue_arn": f"{QUEUE}b.fifo"}


@pytest.mark.parametrize(
    ("before", "flags", "after"),
    [
        (WEBHOOK, ["--lambda-arn", f"{FUNCTION}g"], {"type": "lambda", "function_arn": f"{FUNCTION}g"}),
        (WEBHOOK, ["--sqs-arn", f"{QUEUE}q"], {"type": "sqs", "queue_arn": f"{QUEUE}q"}),
        (
            {"type": "lambda", "function_arn": f"{FUNCTION}f", "invocation_type": "Event", "role_arn": ROLE},
            ["--http-url", f"{HOOK}/new"],
            {"type": "http", "url": f"{HOOK}/new", "method": "POST"},
        ),
        (
            {"type": "sqs", "queue_arn": f"{QUEUE}q", "role_arn": ROLE},
            ["--http-url", f"{HOOK}/new", "--http-method", "PUT"],
            {"type": "http", "url": f"{HOOK}/new", "method": "PUT"},
        ),
    ],
)
def test_a_flag_of_another_type_makes_a_new_target(
    capsys: pytest.CaptureFixture[str],
    api: FakeApi,
    before: dict[str, Any],
    flags: list[str],
    after: dict[str, Any],
) -> None:
    """The old target's fields do not apply to another type (a webhook's headers to a Lambda)."""
    api.seed(dict(before))
    assert updated_target(capsys, api, *flags) == after


@pytest.mark.parametrize("flag", [["--lambda-arn", f"{FUNCTION}g"], ["--sqs-arn", f"{QUEUE}q"]])
def test_http_method_beside_another_targets_flag_is_refused(
    capsys: pytest.CaptureFixture[str], api: FakeApi, flag: list[str]
) -> None:
    """(It kept the webhook, with the method, and dropped the ARN, exit 0.)"""
    api.seed(dict(WEBHOOK))
    code, out, err = run(capsys, "jobs", "update", "j1", *flag, "--http-method", "GET")
    assert code == 2 and out == "" and "--http-method is for a webhook" in err, err
    assert api.sent("PUT") == []


def test_a_create_from_a_file_takes_the_flags_url_over_the_files_target(
    capsys: pytest.CaptureFixture[str], api: FakeApi, tmp_path: Path
) -> None:
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"schedule": "rate(1 hour)", "target": WEBHOOK}))
    code, _, err = run(
        capsys, "jobs", "create", "--no-name-check", "--file", str(spec), "--http-url", f"{HOOK}/n"
    )
    assert code == 0, err
    assert api.sent("POST")[0]["target"] == {**WEBHOOK, "url": f"{HOOK}/n"}


def test_a_create_from_flags_is_as_before(capsys: pytest.CaptureFixture[str], api: FakeApi) -> None:
    code, _, err = run(capsys, "jobs", "create", "--no-name-check", *BASE)
    assert code == 0, err
    assert api.sent("POST")[0]["target"] == {"type": "http", "url": f"{HOOK}/p", "method": "POST"}


# -- 2. bad input is exit 2 and one line, never an internal error -------------------------------


@pytest.mark.parametrize("payload", ["[" * 2000, "[" * 1000 + "]" * 1000, "{" + '"a": {' * 3000])
def test_a_payload_nested_too_deeply(capsys: pytest.CaptureFixture[str], api: FakeApi, payload: str) -> None:
    err = refused(capsys, api, "jobs", "create", *BASE, "--payload", payload)
    assert "--payload is nested too deeply" in err, err


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (
            "job.json",
            '{"schedule": "rate(1 hour)", "target": {"type": "http", "url": "https://h.example/p"},'
            ' "payload": ' + "[" * 2000 + "]" * 2000 + "}",
        ),
        (
            "job.yaml",
            "schedule: rate(1 hour)\ntarget: {type: http, url: 'https://h.example/p'}\n"
            "payload: " + "[" * 2000 + "]" * 2000 + "\n",
        ),
        (
            "block.yaml",
            "schedule: rate(1 hour)\npayload:\n"
            + "".join(" " * depth + f"k{depth}:\n" for depth in range(1, 1200))
            + " " * 1200
            + "x: 1\n",
        ),
    ],
)
@pytest.mark.parametrize("verb", [["jobs", "create"], ["jobs", "update", "j1"]])
def test_a_spec_file_nested_too_deeply(
    capsys: pytest.CaptureFixture[str], api: FakeApi, tmp_path: Path, name: str, text: str, verb: list[str]
) -> None:
    spec = tmp_path / name
    spec.write_text(text)
    if verb[1] == "update":
        api.seed(dict(WEBHOOK))
        code, out, err = run(capsys, *verb, "--file", str(spec))
        assert code == 2 and out == "" and err.count("\n") == 1, (code, err)
        assert api.sent("PUT") == []
    else:
        err = refused(capsys, api, *verb, "--file", str(spec))
    assert f"{spec} is nested too deeply to read" in err, err


def test_a_yaml_spec_of_aliases_of_aliases_is_refused_and_an_anchor_is_kept(
    capsys: pytest.CaptureFixture[str], api: FakeApi, tmp_path: Path
) -> None:
    # "billion laughs": eight levels of nine aliases each stand for 9**8 strings; its JSON hung
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, 8)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join([*lines, "schedule: rate(1 hour)", "payload: *l7", ""]))
    err = refused(capsys, api, "jobs", "create", "--no-name-check", "--file", str(bomb))
    assert "expands to more than 1,000,000 values (YAML aliases)" in err, err
    # an anchor used as YAML allows (one target for two alert rules) is read as its JSON
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "schedule: rate(1 hour)\ntarget: &hook {type: http, url: 'https://h.example/p'}\n"
        "alerts: [{on: [failed], target: *hook}, {on: [missed], target: *hook}]\n"
    )
    code, _, err = run(capsys, "jobs", "create", "--no-name-check", "--file", str(spec))
    assert code == 0, err
    sent = api.sent("POST")[0]
    assert [rule["target"] for rule in sent["alerts"]] == [sent["target"]] * 2


def test_a_calendar_file_nested_too_deeply(
    capsys: pytest.CaptureFixture[str], api: FakeApi, tmp_path: Path
) -> None:
    cal = tmp_path / "cal.json"
    cal.write_text('{"timezone": "UTC", "dates": [], "description": ' + "[" * 2000 + "]" * 2000 + "}")
    err = refused(capsys, api, "calendars", "put", "c1", "--file", str(cal))
    assert "nested too deeply" in err and str(cal) in err, err


def test_a_calendar_file_with_nan_is_refused_by_name(
    capsys: pytest.CaptureFixture[str], api: FakeApi, tmp_path: Path
) -> None:
    cal = tmp_path / "cal.json"
    cal.write_text('{"timezone": "UTC", "dates": [], "x": NaN}')
    err = refused(capsys, api, "calendars", "put", "c1", "--file", str(cal))
    assert str(cal) in err and "NaN is not a JSON number" in err, err


@pytest.mark.parametrize("tenant", ["€uro", "ключ"])
@pytest.mark.parametrize("given", ["env", "flag"])
def test_a_tenant_outside_latin1(
    capsys: pytest.CaptureFixture[str], api: FakeApi, monkeypatch: pytest.MonkeyPatch, tenant: str, given: str
) -> None:
    if given == "env":
        monkeypatch.setenv("PUNCTUAL_TENANT", tenant)
        err = refused(capsys, api, "jobs", "list")
    else:
        err = refused(capsys, api, "jobs", "list", "--tenant", tenant)
    assert "the tenant (--tenant, PUNCTUAL_TENANT) cannot be sent as an HTTP header" in err, err
    assert "outside Latin-1" in err, err


def test_a_latin1_tenant_is_still_sent(capsys: pytest.CaptureFixture[str], api: FakeApi) -> None:
    """What a header can carry is the API's to judge (it answers 400 for a tenant it refuses)."""
    code, _, err = run(capsys, "jobs", "list", "--tenant", "équipe")
    assert code == 0, err
    assert api.requests[0][2]["X-Punctual-Tenant"] == "équipe"


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("ключ-1", "'к' (U+043A), a character outside Latin-1"),
        ("a\nb", "a control character (U+000A)"),
        ("a\r\nX-Evil: 1", "a control character (U+000D)"),
        ("a\x00b", "a control character (U+0000)"),
        ("a\udcffb", "(U+DCFF), a character outside Latin-1"),  # an argument that was not UTF-8
    ],
)
@pytest.mark.parametrize("verb", [["jobs", "create", *BASE], ["jobs", "trigger", "j1"]])
def test_an_idempotency_key_no_header_can_carry(
    capsys: pytest.CaptureFixture[str], api: FakeApi, key: str, says: str, verb: list[str]
) -> None:
    err = refused(capsys, api, *verb, "--idempotency-key", key)
    assert "the idempotency key (--idempotency-key) cannot be sent as an HTTP header" in err, err
    assert says in err, err


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (
            {"AWS_SESSION_TOKEN": "tok\nen"},
            "the value of X-Amz-Security-Token cannot be sent as an HTTP header",
        ),
        ({"AWS_ACCESS_KEY_ID": "k€y"}, "the value of Authorization cannot be sent as an HTTP header"),
        ({"AWS_DEFAULT_REGION": "eu west 1"}, "the signing region 'eu west 1'"),
    ],
)
def test_signing_with_credentials_no_header_can_carry(
    capsys: pytest.CaptureFixture[str],
    api: FakeApi,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    says: str,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SECURITY_TOKEN", raising=False)  # botocore reads it before AWS_SESSION_TOKEN
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    err = refused(capsys, api, "jobs", "list", "--sign")
    assert says in err, err


def test_a_signing_region_that_is_no_region(capsys: pytest.CaptureFixture[str], api: FakeApi) -> None:
    err = refused(capsys, api, "jobs", "list", "--sign", "--region", "ключ")
    assert "the signing region 'ключ' (--region, else the AWS configuration) is not a region name" in err


@pytest.mark.parametrize(
    ("endpoint", "says"),
    [
        ("http://127.0.0.1:9/ü", "has 'ü'"),
        ("http://ключ.example", "has 'к'"),
        ("http://a b", "has ' '"),
        ("http://127.0.0.1:99999", "Port out of range"),
        ("http://127.0.0.1:x", "Port could not be cast"),
    ],
)
def test_an_endpoint_that_is_no_url(
    capsys: pytest.CaptureFixture[str], api: FakeApi, endpoint: str, says: str
) -> None:
    """(Internal errors, or "cannot reach", exit 1, as if the API were down.)"""
    err = refused(capsys, api, "jobs", "list", "--endpoint", endpoint)
    assert says in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "list", "--next-token", "\udcff"],
        ["jobs", "list", "--tag", "team=\udcff"],
        ["runs", "list", "j1", "--next-token", "a\udcffb"],
        ["backfills", "get", "j1", "\udcff"],
        ["backfills", "cancel", "j1", "\udcff"],
    ],
)
def test_an_argument_that_was_not_utf8(
    capsys: pytest.CaptureFixture[str], api: FakeApi, argv: list[str]
) -> None:
    """An argument whose bytes are not UTF-8 arrives with surrogate escapes; in a URL it cannot
    be encoded (an internal error)."""
    err = refused(capsys, api, *argv)
    assert "is not UTF-8 text" in err, err


def test_a_request_body_nested_too_deeply_is_the_callers_input(api: FakeApi) -> None:
    """The client's own guard: a body parsed below the recursion limit may not be encoded at a
    deeper stack."""
    payload: list[Any] = []
    for _ in range(5000):
        payload = [payload]
    client = PunctualClient(api.url, tenant="alice")
    with pytest.raises(ClientInputError, match="nested too deeply"):
        client.create_job({"schedule": "rate(1 hour)", "target": WEBHOOK, "payload": payload})
    assert api.requests == []
