"""The documentation documents what a user relies on, and says it as the code does (issue 17,
finding 10). The guides were the README's sections; since issue 34 they are pages under docs/."""

from __future__ import annotations

import re
import time
from pathlib import Path

from local.config import LocalConfig
from punctual.delivery.targets.payload import PLACEHOLDERS
from punctual.models import CatchupPolicy, JobSpec, RetryPolicy

DOCS = Path(__file__).resolve().parents[2] / "docs"
NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four"}


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def section(name: str, title: str) -> str:
    """A heading of a page and its text, up to the next heading of level 1 to 3."""
    text = page(name)
    start = text.index(title)
    following = re.search(r"\n#{1,3} ", text[start + len(title) :])
    return text[start : start + len(title) + (following.start() if following else len(text))]


def test_the_local_worker_count_is_the_configured_default() -> None:
    workers = LocalConfig().workers
    local_mode = page("local-mode.md")
    assert f"{NUMBERS[workers]} worker processes" in local_mode
    assert not any(f"{word} worker processes" in local_mode for n, word in NUMBERS.items() if n != workers)


def test_every_payload_placeholder_is_documented() -> None:
    text = section("schedules.md", "### Payload placeholders")
    for placeholder in PLACEHOLDERS:
        assert f"| `{placeholder}` |" in text, placeholder
    assert "~m" in text  # the suffix of a slot triggered by hand


def test_the_policy_table_lists_every_field_with_its_default() -> None:
    rows = {
        cells[0]: cells[1]
        for line in section("schedules.md", "## Job policies").splitlines()
        if line.startswith("| `") and (cells := [c.strip() for c in line.strip("|").split("|")])
    }
    documented = " ".join(rows)
    for field in JobSpec.model_fields:
        assert f"`{field}" in documented, field
    for prefix, model in (("retry", RetryPolicy), ("catchup", CatchupPolicy)):
        for name, info in model.model_fields.items():
            key = next(k for k in rows if f"`{prefix}.{name}`" in k)
            default = info.default
            shown = (
                str(default).lower() if isinstance(default, bool) else str(getattr(default, "value", default))
            )
            assert shown.removesuffix(".0") in rows[key], (prefix, name, rows[key])
    for name in ("timeout_seconds", "runtime", "overlap", "jitter_seconds", "timezone"):
        default = JobSpec.model_fields[name].default
        assert str(getattr(default, "value", default)) in rows[f"`{name}`"], name


def test_receiving_a_webhook_shows_verification_in_python_and_node() -> None:
    text = section("delivery.md", "## Receiving a webhook")
    assert "from standardwebhooks.webhooks import Webhook" in text
    assert 'import { Webhook, WebhookVerificationError } from "standardwebhooks";' in text
    for header in ("webhook-id", "webhook-timestamp", "webhook-signature", "Idempotency-Key", "Retry-After"):
        assert header in text, header


def test_the_put_example_says_where_job_json_comes_from() -> None:
    lines = page("api.md").splitlines()
    put = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("curl") and "-X PUT" in line and "@job.json" in line
    )
    assert "> job.json" in lines[put - 1]


def test_the_python_receiver_example_verifies_what_punctual_signs() -> None:
    from punctual.delivery.targets.webhooks.signing import sign_webhook

    text = section("delivery.md", "## Receiving a webhook")
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    done: set[str] = set()
    acted: list[object] = []
    scope = {"already_done": done.__contains__, "act_on": acted.append, "mark_done": done.add}
    exec(code.replace('"whsec_..."', repr(secret)), scope)
    body, key = b'{"report":"daily"}', "job-1:2026-11-30T02:00:00Z"
    timestamp = int(time.time())  # the library refuses a timestamp five minutes away from its clock
    headers = {
        "content-type": "application/json",  # as Punctual sends a JSON payload
        "webhook-id": key,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign_webhook(key, timestamp, body, [secret]),
    }
    assert scope["receive"](body, headers) == 200 and acted == [{"report": "daily"}]
    assert scope["receive"](body, headers) == 200 and len(acted) == 1  # a repeat is not acted on
    assert scope["receive"](body + b" ", headers) == 401


def test_the_chain_auditor_section_states_the_defaults_the_code_has() -> None:
    from local.config import LocalConfig
    from punctual.runtime.settings import Settings

    text = section("operations.md", "## Chain auditor")
    defaults = Settings()
    assert f"`auditPeriodMinutes` ({defaults.audit_period_minutes}; context)" in text
    assert f"`auditGraceS` ({defaults.audit_grace_s} s)" in text
    assert f"`PUNCTUAL_AUDIT_INFLIGHT_GRACE_S` ({defaults.audit_inflight_grace_s:,} s" in text
    local = section("local-mode.md", "# Local mode")
    assert (
        f"every {LocalConfig().audit_interval_s} s" in local
        and f"a {LocalConfig().audit_grace_s} s grace" in local
    )
