"""A job's name and tags are labels: no control characters, no bidirectional formatting characters
(QA: a NUL tag echoed into the console; "\u202eevil" in a name displayed as "live"). Stored ones
stay readable; right-to-left text and its marks are labels."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from punctual.console.view import ConsoleQuery, ConsoleQueryError
from punctual.models import Job, JobSpec
from punctual.models.base import ACCEPTED, label_refusal

BASE: dict[str, Any] = {
    "schedule": "rate(1 minute)",
    "target": {"type": "http", "url": "https://example.com/x"},
}


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        ({"name": "\u202eevil"}, "name holds the bidirectional formatting character U+202E"),
        ({"name": "a\x7f"}, "name holds the control character U+007F"),
        ({"name": "a\u0085b"}, "name holds the control character U+0085"),
        ({"name": "x\u2067y"}, "U+2067"),
        ({"tags": {"a\x00": "b"}}, "tag key 'a\\x00' holds the control character U+0000"),
        ({"tags": {"team": "b\x1b[31m"}}, "tag 'team': value holds the control character U+001B"),
        ({"tags": {"k": "\u202dx"}}, "tag 'k': value holds the bidirectional formatting character U+202D"),
    ],
)
def test_a_label_with_such_a_character_is_refused_naming_it(extra: dict[str, Any], names: str) -> None:
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate({**BASE, **extra})
    assert names in str(refused.value)


@pytest.mark.parametrize(
    "extra",
    [
        {"name": "דוח לילי \u200f(ערב)"},  # right-to-left text with its mark
        {"name": "rapport été \u2013 夜"},
        {"tags": {"équipe": "données", "צוות": "נתונים"}},
        {"name": "a\u00a0b"},  # NO-BREAK SPACE is text, not a control
    ],
)
def test_text_in_any_script_is_a_label(extra: dict[str, Any]) -> None:
    JobSpec.model_validate({**BASE, **extra})


def test_a_stored_job_with_one_stays_readable() -> None:
    """Accepted before the rule: read back (the poller's and the API's read), never refused."""
    stored = {
        **BASE,
        "name": "\u202eevil",
        "tags": {"k": "v\x85"},
        "id": "j1",
        "tenant": "t",
        "created_at": "2026-12-01T00:00:00Z",
        "updated_at": "2026-12-01T00:00:00Z",
        "anchor": "2026-12-01T00:00:00Z",
    }
    job = Job.model_validate(stored, context=ACCEPTED)
    assert job.name == "\u202eevil" and job.tags == {"k": "v\x85"}


@pytest.mark.parametrize("tag", ["\x00", "team=\x1b", "a\u202e"])
def test_the_consoles_tag_filter_refuses_one(tag: str) -> None:
    with pytest.raises(ConsoleQueryError, match="tag holds"):
        ConsoleQuery("tenant-a", tag=tag)


def test_label_refusal_names_the_first_character() -> None:
    assert label_refusal("ok \u200e\u200f") is None
    assert label_refusal("a\tb") == "holds the control character U+0009"
