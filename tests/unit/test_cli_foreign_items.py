"""Another service's JSON with the listing's ``items`` (or a job's ``id``) is not the API's answer
(QA30): a job service of another product answering ``GET /v1/jobs`` with ``{"items": [{"id": ...}]}``
printed its items as the tenant's jobs with ``-o json`` (exit 0) and ended the table in an internal
error (``KeyError: 'state'``), as did ``jobs get``, ``runs list``, ``calendars list`` and ``jobs
alerts``. Each object the API answers holds the fields its row and detail are made of; an answer
without them is named as another service's, exit 1, nothing on stdout."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from punctual_cli import cli

FOREIGN_ITEMS = {"items": [{"id": "build-17", "owner": "ci"}], "next_token": None}


class _Foreign(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        server: Any = self.server
        body = json.dumps(server.answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _serving(answer: Any) -> Iterator[str]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Foreign)
    server.answer = answer
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


FOREIGN_OBJECT = {"id": "build-17", "name": "nightly", "slot": "x"}


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("answer", "argv"),
    [
        (FOREIGN_ITEMS, ("jobs", "list")),
        (FOREIGN_ITEMS, ("jobs", "list", "-o", "json")),
        (FOREIGN_ITEMS, ("jobs", "list", "--all")),
        (FOREIGN_ITEMS, ("runs", "list", "j1")),
        (FOREIGN_ITEMS, ("runs", "list", "j1", "-o", "json")),
        (FOREIGN_ITEMS, ("calendars", "list")),
        (FOREIGN_ITEMS, ("calendars", "list", "-o", "json")),
        (FOREIGN_ITEMS, ("jobs", "alerts", "j1")),
        (FOREIGN_ITEMS, ("jobs", "alerts", "j1", "-o", "json")),
        (FOREIGN_OBJECT, ("jobs", "get", "j1")),
        (FOREIGN_OBJECT, ("jobs", "get", "j1", "-o", "json")),
        (FOREIGN_OBJECT, ("runs", "get", "j1", "2026-12-07T09:00:00Z")),
    ],
)
def test_another_services_json_is_not_the_tenants_jobs_or_runs(
    capsys: pytest.CaptureFixture[str], answer: Any, argv: tuple[str, ...]
) -> None:
    for endpoint in _serving(answer):
        code, out, err = _run(capsys, *argv, "--endpoint", endpoint, "--tenant", "t")
        assert (code, out) == (1, ""), (code, out, err)
        assert err.count("\n") == 1 and "is not Punctual's API" in err and "internal error" not in err, err


def test_a_listing_whose_page_token_comes_back_is_stopped_not_followed_forever(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a service that answers every page with the same next_token (a listing that never ends)
    page = {"items": [{"id": "a", "name": "a", "state": "ENABLED", "schedule": "rate(1 hour)", "version": 1}], "next_token": "again"}  # fmt: skip
    for url in _serving(page):
        # When `--all` follows the pages, Then it stops at the repeated token, exit 1, one line
        code, out, err = _run(capsys, "jobs", "list", "--all", "--endpoint", url)
        assert code == 1 and out == ""
        assert "page token it gave before" in err and len(err.strip().splitlines()) <= 2
