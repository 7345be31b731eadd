"""What every model of the vocabulary shares: the strict base, field helpers, JSON checks, limits.

Limits are named with their unit and, where they mirror a service quota, that quota's source.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable
from typing import Any, Final, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)
from pydantic_core import SchemaValidator

_M = TypeVar("_M", bound=BaseModel)

# Validation context key: a job a dispatch message carries (signed by the scheduler, validated when
# it was stored), whose whole-spec checks are not made again on the hot path.
CARRIED = "carried"
# Validation context key: a job read back from the store (accepted when it was written). Rules added
# to the input since are not applied to it: a stored job never becomes unreadable (and stops) by an
# upgrade that tightened what a new job may say.
STORED = "stored"
# The context that says so (a job read back, shown, or compared as it was accepted).
ACCEPTED: Final = {STORED: True}


def accepted_before(context: Any) -> bool:
    """Whether a validation is of a job accepted earlier (read from the store, or carried by a
    dispatch message): input-only rules are skipped for it."""
    return bool(context) and bool(context.get(STORED) or context.get(CARRIED))


MAX_PAYLOAD_BYTES = 256 * 1024
PAYLOAD_TOO_LARGE = "more than the"  # how the size error reads: the API answers it 413, not 422
MAX_NAME_CHARS = 128
MAX_SCHEDULE_CHARS = 1400  # after() of 20 parents (punctual.timing.schedules.parser); others 256
MAX_DESCRIPTION_CHARS = 1024
MAX_TAGS = 50
MAX_TAG_KEY_CHARS = 128
MAX_TAG_VALUE_CHARS = 256
MAX_LAMBDA_TIMEOUT_S = 840  # leaves the worker Lambda a minute of its 15 to record the result
MAX_ECS_TIMEOUT_S = 7 * 24 * 3600
MAX_HEADERS = 50
MAX_HEADER_VALUE_CHARS = 8192
# A payload is a JSON document bounded in size, depth and members: a deeper document breaks
# JSON parsers (pydantic's stops at 200 levels) and every reader of the stored job with it.
MAX_PAYLOAD_DEPTH = 32
MAX_PAYLOAD_MEMBERS = 10_000
MAX_PAYLOAD_KEY_CHARS = 1024
MAX_TIMEZONE_CHARS = 64
# Headers an HTTP target may not set: the worker owns framing, routing, and the signature.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
        "idempotency-key",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "punctual-fencing-token",
        "punctual-fencing-signature",
    }
)


def header_key(name: str) -> str:
    """A header name as a receiver may read it: any letter case, and ``_`` for ``-`` (a CGI or
    WSGI receiver reads ``Punctual_Tenant`` as ``Punctual-Tenant``: QA21)."""
    return name.lower().replace("_", "-")


MAX_ATTEMPTS = 186  # EventBridge Scheduler's MaximumRetryAttempts (185) plus the first attempt
MAX_JITTER_S = 24 * 3600  # EventBridge Scheduler's widest flexible time window (1440 minutes)
MAX_JOB_CALENDARS = 10
# Not dots alone: a path segment '.' or '..' is normalised away by curl and most HTTP clients.
CALENDAR_NAME_RE = re.compile(r"(?!\.+\Z)[A-Za-z0-9_.-]{1,64}")
CALENDAR_NAME_RULE = "1-64 characters of letters, digits, '-', '_' and '.', not dots alone"
MAX_ATTEMPT_RECORDS = 20  # the bounded list of past attempts on an execution record


class StrictModel(BaseModel):
    """Base for user input: unknown fields are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


def int_field(default: int, description: str, **limits: Any) -> Any:
    """An integer field: ``true`` is not 1 and ``2.5`` is not 2 (strict), within ``limits``."""
    return Field(default=default, strict=True, description=description, **limits)


def seconds_field(default: float, description: str, **limits: Any) -> Any:
    """A number of seconds: no booleans, no NaN or Infinity."""
    return Field(default=default, strict=True, allow_inf_nan=False, description=description, **limits)


def flag_field(default: bool, description: str) -> Any:
    """A boolean field: only ``true`` or ``false`` (not ``1``, ``"yes"``)."""
    return Field(default=default, strict=True, description=description)


def _check_text(text: str, path: str) -> None:
    """JSON text is Unicode: a lone surrogate (``"\\ud800"``) has no UTF-8 form to store or send."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{path}: a string holds a lone surrogate, which is not Unicode text") from None


# What a label (a job's name, its tags' keys and values) may not hold: C0 and C1 controls and DEL
# (a NUL echoed into the console, an escape sequence into a terminal), and the bidirectional
# embeddings, overrides and isolates U+202A-U+202E and U+2066-U+2069, which make text display as
# other text (CVE-2021-42574: "\u202eevil" shows as "live"). The marks U+200E and U+200F stay:
# right-to-left text needs them. EventBridge Scheduler and Kubernetes take fewer characters still.
BIDI_FORMATTING = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def label_refusal(text: str) -> str | None:
    """Why ``text`` is no label (the first character refused, named by its code point), or None."""
    for ch in text:
        code = ord(ch)
        if code < 32 or 0x7F <= code <= 0x9F:
            return f"holds the control character U+{code:04X}"
        if ch in BIDI_FORMATTING:
            return f"holds the bidirectional formatting character U+{code:04X} (it changes how text displays)"
    return None


def without_unknown_fields(
    data: dict[str, Any], errors: list[Any], removed: list[tuple[tuple[Any, ...], Any]] | None = None
) -> dict[str, Any] | None:
    """``data`` less the fields a validation found unknown (``extra_forbidden``), when those were
    all it found; None otherwise. A stored document a newer version wrote (a rollback: a field
    added since, QA17) is read by this one as it reads its own, without what it does not know,
    instead of as unreadable (a job that stops). ``errors`` are pydantic's ``errors()``; a union's
    tag in a location (``target.http.x``) is not a key of the document and is passed over.
    ``removed`` gets each field taken away: its path of document keys and its value."""
    if not errors or any(error.get("type") != "extra_forbidden" for error in errors):
        return None
    copy: dict[str, Any] = json.loads(json.dumps(data))
    for error in errors:
        path = list(error.get("loc", ()))
        current: Any = copy
        walked: list[Any] = []
        for position, key in enumerate(path):
            last = position == len(path) - 1
            if isinstance(current, dict) and key in current:
                walked.append(key)
                if last:
                    value = current.pop(key)
                    if removed is not None:
                        removed.append((tuple(walked), value))
                else:
                    current = current[key]
            elif isinstance(current, list) and isinstance(key, int) and 0 <= key < len(current):
                walked.append(key)
                current = current[key]
            elif last:
                return None  # not where the error says: left to the caller's refusal
    return copy


def read_stored(model: type[_M], document: str, context: Any = None) -> _M:
    """``model`` from a stored JSON ``document``, read as :func:`without_unknown_fields` allows
    (fields a newer version added are left out); ValidationError (or ValueError) otherwise."""
    try:
        return model.model_validate_json(document, context=context)
    except ValidationError as exc:
        data = json.loads(document)
        known = without_unknown_fields(data, exc.errors()) if isinstance(data, dict) else None
        if known is None:
            raise
        return model.model_validate(known, context=context)


def validator_without(model: type[BaseModel], left_out: Collection[str] | None = None) -> SchemaValidator:
    """A validator of ``model`` (its core schema, nested models' too) without the Python validators
    (field and model validators) that ``left_out`` names by qualified name (``JobSpec._name``); all
    of them when None: its types alone. It makes the same ``model`` instances from what those
    validators would have passed, without a Python call each (about 0.3 µs). Raises ValueError
    when ``left_out`` names one the schema does not hold (renamed since: nothing would be left out).
    """
    found: set[str] = set()

    def without(node: Any) -> Any:
        if isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, str) and kind.startswith("function-") and "schema" in node:
                name = node["function"]["function"].__qualname__
                if left_out is None or name in left_out:
                    found.add(name)
                    return without(node["schema"])  # the function's own schema, without the function
            return {key: without(value) for key, value in node.items()}
        if isinstance(node, list):
            return [without(value) for value in node]
        return node

    schema = without(model.__pydantic_core_schema__)
    if left_out is not None and set(left_out) - found:
        raise ValueError(f"{model.__name__} has no validators {sorted(set(left_out) - found)}")
    return _built_from_tree(schema)


def plain_model(model: type[BaseModel]) -> bool:
    """Whether ``model`` has no validator, serializer or computed field of its own, decorated or
    annotated on a field: what a fast path that builds or writes its instances by hand (as
    validation and ``model_dump_json`` would) assumes. A model that gains one is then built and
    written by pydantic again, not silently differently."""
    decorators = model.__pydantic_decorators__
    if any(
        (
            decorators.validators,
            decorators.field_validators,
            decorators.root_validators,
            decorators.field_serializers,
            decorators.model_serializers,
            decorators.model_validators,
            decorators.computed_fields,
        )
    ):
        return False
    return not any(
        type(meta).__module__.startswith("pydantic.functional_")  # AfterValidator, PlainSerializer...
        for field in model.model_fields.values()
        for meta in field.metadata
    )


def _model_classes(node: Any, found: set[type]) -> set[type]:
    """The model classes a core schema validates into (its ``model`` nodes' ``cls``)."""
    if isinstance(node, dict):
        if node.get("type") == "model" and isinstance(node.get("cls"), type):
            found.add(node["cls"])
        for value in node.values():
            _model_classes(value, found)
    elif isinstance(node, list):
        for value in node:
            _model_classes(value, found)
    return found


def _built_from_tree(schema: Any) -> SchemaValidator:
    """A validator built from ``schema`` node by node. pydantic-core reuses a complete model
    class's own validator for a ``model`` node whose class has no model validator (a target, a
    policy): that validator holds every Python validator of the class, which the tree left out.
    So the classes are marked incomplete while it is built (at import, one thread), and a nested
    model's rules are left out as the tree says (``tests/unit/test_carried_read.py`` checks that
    a carried target's rules are not run)."""
    classes = [cls for cls in _model_classes(schema, set()) if cls.__dict__.get("__pydantic_complete__")]
    for cls in classes:
        setattr(cls, "__pydantic_complete__", False)  # noqa: B010 (a class attribute pydantic-core reads)
    try:
        return SchemaValidator(schema)
    finally:
        for cls in classes:
            setattr(cls, "__pydantic_complete__", True)  # noqa: B010


_INFINITIES = (float("inf"), float("-inf"))


def _plain_json(value: Any) -> int | None:
    """When :func:`check_json_value` finds nothing to refuse in ``value`` (the same checks, without
    the path of each member: every stored job's payload is checked again on each read, and is
    almost always fine), an upper bound of the bytes of its compact ASCII JSON (what
    :data:`MAX_PAYLOAD_BYTES` counts), so that a payload well under the limit is not encoded to be
    measured (1.3 µs of each read of a small one); None says only that the slow walk must name
    what is wrong."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    members = 0
    size = 0
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is str:
            if not item.isascii():
                return None
            size += 6 * len(item) + 2  # a control character is escaped as \u00XX
        elif kind is int:
            size += item.bit_length() // 3 + 2  # digits (log10(2) < 1/3) and a sign
        elif kind is bool or item is None:
            size += 5
        elif kind is float:
            if item != item or item in _INFINITIES:
                return None
            size += 24  # the longest repr of a float: -1.2345678901234567e-308
        elif kind is dict or kind is list:
            if depth >= MAX_PAYLOAD_DEPTH:
                return None
            members += len(item)
            if members > MAX_PAYLOAD_MEMBERS:
                return None
            size += 2 + len(item)  # brackets and separators
            if kind is list:
                stack.extend((member, depth + 1) for member in item)
                continue
            for key, member in item.items():
                if type(key) is not str or not key.isascii() or len(key) > MAX_PAYLOAD_KEY_CHARS:
                    return None
                size += 6 * len(key) + 3  # the key, its quotes and its colon
                stack.append((member, depth + 1))
        else:
            return None  # a subclass, or not JSON: the slow walk decides
    return size


def check_json_value(value: Any, what: str = "payload") -> int | None:
    """Refuse what is not plain, bounded JSON: NaN/Infinity, depth, member count, long keys.

    Walks the document without recursion, so a hostile depth cannot exhaust the stack. Returns
    an upper bound of its compact ASCII JSON's bytes when the fast pass could tell one (None:
    measure it).
    """
    bound = _plain_json(value)
    if bound is None:
        _walk_json(value, what)
    return bound


def _walk_json(value: Any, what: str) -> None:
    """:func:`check_json_value`'s walk, naming the first member it refuses."""
    stack: list[tuple[Any, str, int]] = [(value, what, 0)]
    members = 0
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item, path)
            continue
        if isinstance(item, bool) or item is None or isinstance(item, int):
            continue
        if isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                raise ValueError(f"{path}: NaN and Infinity are not JSON numbers")
            continue
        if isinstance(item, dict | list):
            if depth >= MAX_PAYLOAD_DEPTH:
                raise ValueError(f"{what} is nested more than {MAX_PAYLOAD_DEPTH} levels deep (at {path})")
            members += len(item)
            if members > MAX_PAYLOAD_MEMBERS:
                raise ValueError(f"{what} has more than {MAX_PAYLOAD_MEMBERS} object members and array items")
            if isinstance(item, dict):
                for key, member in item.items():
                    if not isinstance(key, str):
                        raise ValueError(f"{path}: object keys must be strings")
                    _check_text(key, path)
                    if len(key) > MAX_PAYLOAD_KEY_CHARS:
                        raise ValueError(f"{path}: a key is longer than {MAX_PAYLOAD_KEY_CHARS} characters")
                    stack.append((member, f"{path}.{key[:40]}", depth + 1))
            else:
                stack.extend((member, f"{path}[{i}]", depth + 1) for i, member in enumerate(item))
            continue
        raise ValueError(f"{path}: {type(item).__name__} is not a JSON value")


def text_charset_problem(text: str, content_type: str) -> str | None:
    """Why ``text``, sent as UTF-8 (what Standard Webhooks libraries verify a body as), would not
    read as itself in the charset ``content_type`` names, or None (no charset, or it agrees)."""
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() != "charset":
            continue
        charset = value.strip().strip('"').strip()
        try:
            read = text.encode().decode(charset)
        except LookupError:
            return f"charset {charset[:40]!r} of the Content-Type is not a text encoding"
        except UnicodeDecodeError:
            read = None
        if read != text:
            return (
                f"a text payload is sent as UTF-8 (the bytes webhook-signature signs), and this one"
                f" would read otherwise as {charset[:40]!r}, the Content-Type's charset: name utf-8,"
                " or keep the text to ASCII"
            )
    return None


class KeyGivenTwice(ValueError):
    """A JSON object (or YAML mapping) with a key given twice: which of its values is meant is
    unknown (QA30: parsers keep the last one, so ``schedule`` twice made a job of the second
    without a word; YAML 1.2 requires unique keys, and kubectl refuses such a manifest)."""


def unique_keys(pairs: Iterable[tuple[Any, Any]]) -> dict[Any, Any]:
    """``json.loads``'s ``object_pairs_hook``: the object, or :class:`KeyGivenTwice` naming a key
    it gives twice."""
    found: dict[Any, Any] = {}
    for key, value in pairs:
        if key in found:
            raise KeyGivenTwice(f"the key {str(key)[:80]!r} is given twice in one object")
        found[key] = value
    return found


def is_json_media_type(content_type: str) -> bool:
    """``application/json``, ``application/*+json`` (parameters ignored)."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def instant_text(value: Any, field: str) -> Any:
    """A date-time input before pydantic reads it: a number (which it would take as epoch seconds)
    is refused, naming ``field``."""
    if isinstance(value, (bool, int, float)):
        raise ValueError(f"{field} must be an RFC 3339 date-time string, such as 2027-01-01T00:00:00Z")
    return value
