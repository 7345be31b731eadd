"""The dispatch message's hand-written payload encoder and the keyed HMAC copy give exactly what the
JSON encoder and ``hmac.new`` give: the signed text is the wire format, and a deploy mixes versions."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.dispatch.queues import DispatchMessage, _built
from punctual.security.message_auth import KEY_LABEL, DispatchSigner

KEY = "test-dispatch-key-" + "k" * 32
SIGNER = DispatchSigner(KEY)
# The HMAC key: derived from the dispatch key under a label (punctual.security.message_auth)
DERIVED = hmac.new(KEY.encode(), KEY_LABEL, hashlib.sha256).digest()

_text = st.text(max_size=40)  # any characters: quotes, backslashes, controls, non-ASCII, astral
_odd = st.one_of(  # what a body read from the queue may hold where a sender writes a str, int or bool
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    _text,
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_typed = st.fixed_dictionaries(
    {
        "tenant": _text,
        "job_id": _text,
        "slot": _text,
        "scheduled_at": _text,
        "attempt": st.integers(min_value=-(10**20), max_value=10**20),
        "job_version": st.integers(min_value=0, max_value=10**20),
        "kind": _text,
        "released_at": _text,
        "ordered": st.booleans(),
        "not_before": st.one_of(st.just(""), _text),
        "backfill": st.one_of(st.just(""), _text),
        "alert": st.one_of(st.just(""), _text),
        "resend": st.integers(min_value=0, max_value=10**6),
        "spec": st.one_of(st.just(""), _text, st.just('{"id":"j","payload":{"q":"\\"é\\" \\u00e9 ünï\\n"}}')),
        "last": st.booleans(),
        "incarnation": st.one_of(st.just(""), _text),
        "sig": st.one_of(st.just(""), st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)),
    }
)


def _json_payload(fields: dict[str, Any]) -> str:
    """The payload as the JSON encoder writes it (the encoder the hand-written one replaces)."""
    message = _built(fields)
    return message._encode_payload_json()


def _both(fields: dict[str, Any]) -> tuple[str | type[Exception], str | type[Exception]]:
    out: list[str | type[Exception]] = []
    for encode in (lambda: _built(fields)._encode_payload(), lambda: _json_payload(fields)):
        try:
            out.append(encode())
        except (TypeError, ValueError) as exc:
            out.append(type(exc))
    return out[0], out[1]


@settings(max_examples=400, deadline=None)
@given(fields=_typed)
def test_the_payload_is_the_json_encoders_text_for_every_sender_written_message(
    fields: dict[str, Any],
) -> None:
    message = _built(fields)
    fast = message._encode_payload()
    assert fast == message._encode_payload_json()
    # and it is the compact JSON of the fields in declaration order, the empty optional ones left out
    optional = ("not_before", "backfill", "alert", "resend", "spec", "last", "incarnation")
    expected = {
        k: v for k, v in dataclasses.asdict(message).items() if k != "sig" and (k not in optional or v)
    }
    assert fast == json.dumps(expected, separators=(",", ":"))


@settings(max_examples=400, deadline=None)
@given(fields=_typed, odd=st.dictionaries(st.sampled_from(list(DispatchMessage.__dataclass_fields__)), _odd))
def test_a_field_of_another_type_is_encoded_as_the_json_encoder_does(
    fields: dict[str, Any], odd: dict[str, Any]
) -> None:
    """A body read from the queue may hold any JSON value in any field: its payload (what verify
    signs) is the encoder's, or the same error."""
    fast, slow = _both({**fields, **odd})
    assert fast == slow


def test_every_field_is_in_the_payload() -> None:
    """A field added to the message and not to the hand-written encoder would go unsigned."""
    values: dict[str, Any] = {}
    for name, spec in DispatchMessage.__dataclass_fields__.items():
        kind = str(spec.type)
        values[name] = {"int": 7, "bool": True}.get(kind, f"v-{name}")
    message = _built(values)
    payload = json.loads(message._encode_payload())
    assert set(payload) == set(DispatchMessage.__dataclass_fields__) - {"sig"}
    assert message._encode_payload() == message._encode_payload_json()


@settings(max_examples=200, deadline=None)
@given(fields=_typed)
def test_the_signature_is_hmac_sha256_of_the_payload(fields: dict[str, Any]) -> None:
    message = _built(fields)
    expected = hmac.new(DERIVED, message.payload().encode(), hashlib.sha256).hexdigest()
    assert SIGNER.signature(message) == expected
    signed = SIGNER.sign(message)
    assert signed.sig == expected and SIGNER.verify(DispatchMessage.from_body(signed.to_body()))


def test_a_signature_leaves_the_keyed_hmac_as_it_was() -> None:
    """The keyed HMAC is copied, never updated: the same message signs alike however often, and
    two messages signed one after the other each get their own signature."""
    a = _built(
        {"tenant": "t", "job_id": "a", "slot": "s", "scheduled_at": "x", "attempt": 1, "job_version": 1}
    )
    b = dataclasses.replace(a, job_id="b")
    first = SIGNER.signature(a)
    assert SIGNER.signature(b) != first
    assert SIGNER.signature(a) == first


def test_message_for_gives_every_field_in_declaration_order() -> None:
    """``message_for`` sets the message's fields at once: each one, in order, as the constructor would."""
    from datetime import UTC, datetime

    from punctual.dispatch.queues import message_for
    from punctual.models import Job, JobSpec

    spec = JobSpec.model_validate(
        {"schedule": "rate(1 minute)", "target": {"type": "http", "url": "https://example.com/h"}}
    )
    at = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    job = Job(**spec.model_dump(), id="j", tenant="t", created_at=at, updated_at=at, anchor=at)
    made = message_for(job, "2026-11-30T10:00:00Z", at, 2, "retry", at, "bf-1:1", spec="{}", last=True)
    expected = DispatchMessage(
        tenant="t",
        job_id="j",
        slot="2026-11-30T10:00:00Z",
        scheduled_at="2026-11-30T10:00:00.000Z",
        attempt=2,
        job_version=job.version,
        kind="retry",
        released_at="2026-11-30T10:00:00.000Z",
        ordered=False,
        backfill="bf-1:1",
        spec="{}",
        last=True,
    )
    assert made == expected and list(vars(made)) == list(DispatchMessage.__dataclass_fields__)
    assert made.payload() == expected.payload()
