"""The service's own contract: botocore's model of ``scheduler`` (2021-06-30), read at run time.

Routes, input shapes, their limits (length, range, pattern, enum, required) and locations (URI,
query string, body) all come from it, so a request is checked exactly as the service documents
it: :func:`read_input` gathers an operation's input from an API Gateway event and validates every
member; a member Punctual cannot honour is refused later, by name (:mod:`.mapping`). botocore is
in every Lambda runtime and in the venv; the model is loaded once per process.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache
from typing import Any
from urllib.parse import unquote

from punctual.api.scheduler.errors import invalid
from punctual.models import KeyGivenTwice, unique_keys

SERVICE = "scheduler"
API_VERSION = "2021-06-30"


@cache
def service_model() -> dict[str, Any]:
    """botocore's service model of EventBridge Scheduler (the JSON document, as a dict)."""
    from botocore.loaders import create_loader

    model: dict[str, Any] = create_loader().load_service_model(SERVICE, "service-2", API_VERSION)
    return model


def shapes() -> dict[str, Any]:
    found: dict[str, Any] = service_model()["shapes"]
    return found


@cache
def _routes() -> tuple[tuple[str, re.Pattern[str], str], ...]:
    routes = []
    for name, operation in service_model()["operations"].items():
        uri = operation["http"]["requestUri"]
        pattern = re.sub(
            r"\{(\w+)\}",
            lambda m: f"(?P<{m.group(1)}>.+)" if m.group(1) == "ResourceArn" else f"(?P<{m.group(1)}>[^/]+)",
            uri,
        )
        routes.append((operation["http"]["method"], re.compile(f"^{pattern}\\Z"), name))
    return tuple(routes)


def route(method: str, path: str) -> tuple[str, dict[str, str]] | None:
    """The operation a request names and its URI parameters (decoded); None if it names none.

    Raises
    ------
    SchedulerError
        ValidationException: the path is one of the service's, but not with this method.
    """
    known = False
    for verb, pattern, name in _routes():
        match = pattern.match(path)
        if match:
            known = True
            if verb == method:
                return name, {key: unquote(value) for key, value in match.groupdict().items()}
    if known:
        raise invalid(f"{method[:10]} is not an operation of {path[:80]}")
    return None


def serves(path: str) -> bool:
    """Whether ``path`` belongs to the scheduler API (else it is Punctual's own ``/v1``)."""
    return path in ("/schedules", "/schedule-groups") or path.startswith(
        ("/schedules/", "/schedule-groups/", "/tags/")
    )


# --------------------------------------------------------------------------- input


def read_input(operation: str, event: Mapping[str, Any], uri: Mapping[str, str]) -> dict[str, Any]:
    """The operation's input, from the URI, the query string and the JSON body, validated.

    Raises
    ------
    SchedulerError
        ValidationException naming the first member that breaks the model (type, required,
        length, range, pattern, enum) or that the operation does not have.
    """
    shape_name = service_model()["operations"][operation].get("input", {}).get("shape")
    if shape_name is None:
        return {}
    shape = shapes()[shape_name]
    query: Mapping[str, list[str]] = event.get("multiValueQueryStringParameters") or {}
    body = _body(event)
    values: dict[str, Any] = {}
    body_members = set()
    for member, spec in shape["members"].items():
        location = spec.get("location")
        wire = spec.get("locationName", member)
        target = shapes()[spec["shape"]]
        if location == "uri":
            if wire in uri:
                values[member] = uri[wire]
        elif location == "querystring":
            given = query.get(wire)
            if given:
                values[member] = given if target["type"] == "list" else _scalar(given[-1], target, member)
        else:
            body_members.add(member)
            if member in body:
                values[member] = body[member]
    unknown = sorted(set(body) - body_members)
    if unknown:
        raise invalid(f"{operation} has no member {unknown[0][:64]!r}")
    validate(values, shape_name, "")
    return values


def _body(event: Mapping[str, Any]) -> dict[str, Any]:
    text = event.get("body")
    if not text:
        return {}
    if event.get("isBase64Encoded"):
        import base64
        import binascii

        try:
            text = base64.b64decode(str(text), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise invalid("the request body is not UTF-8 JSON") from None
    try:
        parsed = json.loads(str(text), object_pairs_hook=unique_keys)
    except KeyGivenTwice as exc:  # QA30: the last value was taken without a word
        raise invalid(f"{exc} of the request body") from None
    except (ValueError, RecursionError):
        raise invalid("the request body is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise invalid("the request body must be a JSON object")
    try:
        stripped: dict[str, Any] = _without_nulls(parsed)
    except RecursionError:  # (deeper than any member of the model nests)
        raise invalid("the request body is nested too deeply") from None
    return stripped


def _without_nulls(value: Any) -> Any:
    """``value`` with every object member whose value is JSON ``null`` left out, at any depth: a
    null member is an omitted one, as the service's JSON protocol takes it (QA29: a null
    ``MaximumRetryAttempts`` was an InternalServerException, a null ``LaunchType`` or
    ``MaximumEventAgeInSeconds`` refused, where an omitted one takes its default). A null list
    item stays, and is refused as the item it is not."""
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _scalar(text: str, shape: Mapping[str, Any], member: str) -> Any:
    if shape["type"] in ("integer", "long"):
        # Any number of digits is an integer, which validate() checks against the member's range
        # (QA23: one of more than 12 digits was "not an integer")
        if not re.fullmatch(r"-?\d+", text):
            raise invalid(f"{member} must be an integer")
        try:
            return int(text)
        except ValueError:  # more digits than Python converts
            raise invalid(f"{member} is out of range") from None
    return text


def _where(path: str, member: str) -> str:
    return f"{path}.{member}" if path else member


def validate(value: Any, shape_name: str, path: str) -> None:
    """Check ``value`` against the shape ``shape_name``; ``path`` names it in the message."""
    shape = shapes()[shape_name]
    kind = shape["type"]
    name = path or shape_name
    if kind == "structure":
        if not isinstance(value, dict):
            raise invalid(f"{name} must be an object")
        for required in shape.get("required", []):
            if value.get(required) is None:
                raise invalid(f"{_where(path, required)} is required")
        for member, item in value.items():
            spec = shape["members"].get(member)
            if spec is None:
                raise invalid(f"{_where(path, str(member)[:64])} is not a member of {shape_name}")
            if item is not None:
                validate(item, spec["shape"], _where(path, member))
        return
    if kind == "list":
        if not isinstance(value, list):
            raise invalid(f"{name} must be a list")
        _bounds(len(value), shape, name, "items")
        for index, item in enumerate(value):
            validate(item, shape["member"]["shape"], f"{name}[{index}]")
        return
    if kind == "map":
        if not isinstance(value, dict):
            raise invalid(f"{name} must be an object")
        _bounds(len(value), shape, name, "entries")
        for key, item in value.items():
            validate(key, shape["key"]["shape"], f"{name} key")
            validate(item, shape["value"]["shape"], f"{name}.{str(key)[:64]}")
        return
    if kind == "string":
        if not isinstance(value, str):
            raise invalid(f"{name} must be a string")
        if not value.isascii() and not _unicode(value):
            raise invalid(f"{name} holds a lone surrogate, which is not Unicode text")
        _bounds(len(value), shape, name, "characters")
        if "enum" in shape and value not in shape["enum"]:
            raise invalid(f"{name} must be one of {', '.join(shape['enum'])}, not {value[:64]!r}")
        if "pattern" in shape and not re.fullmatch(shape["pattern"], value):
            raise invalid(f"{name} {value[:128]!r} does not match the pattern {shape['pattern']}")
        return
    if kind in ("integer", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(f"{name} must be an integer")
        if "min" in shape and value < shape["min"]:
            raise invalid(f"{name} must be at least {shape['min']}")
        if "max" in shape and value > shape["max"]:
            raise invalid(f"{name} must be at most {shape['max']}")
        return
    if kind == "boolean":
        if not isinstance(value, bool):
            raise invalid(f"{name} must be true or false")
        return
    if kind == "timestamp":
        to_datetime(value, name)
        return
    raise invalid(f"{name}: shapes of type {kind} are not accepted")  # the model has none


def _bounds(size: int, shape: Mapping[str, Any], name: str, unit: str) -> None:
    if "min" in shape and size < shape["min"]:
        raise invalid(f"{name} must have at least {shape['min']} {unit}")
    if "max" in shape and size > shape["max"]:
        raise invalid(f"{name} must have at most {shape['max']} {unit}")


def to_datetime(value: Any, name: str) -> datetime:
    """A timestamp as botocore sends it in a JSON body (epoch seconds), or ISO 8601 text."""
    if isinstance(value, bool):
        raise invalid(f"{name} must be a timestamp")
    if isinstance(value, int | float):
        if not math.isfinite(value) or not 0 <= value < 253402300800:
            raise invalid(f"{name} is not a valid timestamp")
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise invalid(f"{name} is not a valid timestamp") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise invalid(f"{name} must be a timestamp")


def epoch(instant: datetime | None) -> float | None:
    """A timestamp as the service answers it in JSON: epoch seconds."""
    return None if instant is None else instant.timestamp()


def _unicode(text: str) -> bool:
    """Whether ``text`` has a UTF-8 form (a lone surrogate, ``"\\udc00"`` in JSON, has none)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
