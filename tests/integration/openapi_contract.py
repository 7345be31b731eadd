"""Every answer the API gives is one its committed ``openapi.json`` declares.

A client generated from the document knows only the statuses and the headers it declares: an
undeclared status is an exception it has no type for, and an undeclared header (``ETag``,
``Location``, ``Retry-After``) one it cannot read. :func:`undeclared` says what of an answer the
document leaves out; the API tests' client (``api_harness.ApiClient.call``) fails on it, so every
answer the suite provokes is checked (QA: 429, 503, 400, 403, 413 and 415 were answered by
operations that declared none of them, and no header was declared anywhere).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The headers a client acts on: the version for If-Match, the new resource, when to retry.
CHECKED_HEADERS = ("etag", "location", "retry-after")


@cache
def _operations() -> list[tuple[re.Pattern[str], dict[str, Any]]]:
    document = json.loads((ROOT / "openapi.json").read_text())
    out = []
    for template, item in document["paths"].items():
        pattern = re.escape(template)
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", pattern)
        out.append((re.compile(f"^{pattern}/?$"), item))
    return out


def operation_of(method: str, path: str) -> dict[str, Any] | None:
    """The document's operation that serves ``method`` on ``path`` (HEAD: GET's); None when the
    document has none (an unknown path, a method the path does not take, EventBridge
    Scheduler's API: answered before any operation, and not in this document)."""
    verb = "get" if method.upper() == "HEAD" else method.lower()
    for pattern, item in _operations():
        if pattern.match(path) and verb in item:
            operation: dict[str, Any] = item[verb]
            return operation
    return None


def undeclared(method: str, path: str, status: int, headers: Mapping[str, str]) -> list[str]:
    """What of an answer the document does not declare: its status for the operation, or a
    checked header for that status. Empty when it declares all of it (or has no operation)."""
    operation = operation_of(method, path.split("?", 1)[0])
    if operation is None or method.upper() == "OPTIONS":
        return []
    name = operation.get("operationId", f"{method} {path}")
    response = operation["responses"].get(str(status))
    if response is None:
        return [f"{name} answered {status}, which it does not declare"]
    declared = {header.lower() for header in response.get("headers", {})}
    sent = {header.lower() for header in headers} & set(CHECKED_HEADERS)
    return [f"{name} {status} sent {header}, which it does not declare" for header in sorted(sent - declared)]
