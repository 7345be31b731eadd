"""docs/delivery.md's Python receiver, run as written against the requests Punctual sends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_http_target import SECRET, Receiver, call
from test_http_target import receiver as receiver  # the fixture

DOC = Path(__file__).resolve().parents[2] / "docs" / "delivery.md"


def _recipe() -> dict[str, Any]:
    """The Python block of 'Receiving a webhook', with the job's secret, and the receiver's own
    store of keys and action filled in."""
    text = DOC.read_text().split("## Receiving a webhook", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    acted: list[Any] = []
    done: set[str] = set()
    scope: dict[str, Any] = {"already_done": done.__contains__, "act_on": acted.append, "mark_done": done.add}
    exec(text.replace('"whsec_..."', repr(SECRET)), scope)  # the docs' own example
    scope["acted"] = acted
    return scope


@pytest.mark.parametrize(
    ("payload", "headers", "expected"),
    [
        ({"n": 1}, {}, {"n": 1}),
        ("ping <slot>", {"Content-Type": "text/plain; charset=utf-8"}, "ping <slot>"),  # --payload-text
        ('{"raw": true}', {"Content-Type": "application/x-ndjson"}, '{"raw": true}'),
        (None, {}, None),
    ],
    ids=["json", "text", "ndjson", "none"],
)
def test_the_docs_python_receiver_verifies_and_reads_what_is_sent(
    receiver: Receiver, payload: Any, headers: dict[str, str], expected: Any
) -> None:
    """QA24: the recipe parsed every body as JSON, so a text-payload job's verified request (one
    ``--payload-text`` makes) raised JSONDecodeError in the receiver, a 500: retried, never done."""
    recipe = _recipe()
    call(receiver.url(), payload, headers=headers)
    [seen] = receiver.requests
    sent = {name.lower(): value for name, value in seen.headers.items()}

    assert recipe["receive"](seen.body, sent) == 200
    assert recipe["acted"] == [expected]
    assert recipe["receive"](seen.body, sent) == 200 and recipe["acted"] == [expected]  # a repeat: once
    assert recipe["receive"](seen.body + b" ", sent) == 401
