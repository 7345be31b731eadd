"""The API's OpenAPI document, as served and committed: what Powertools generates from the routes,
with this API's error answers (every error a problem) and its links (what a client can do next)."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler.openapi.models import APIKey, APIKeyIn

from punctual.api import problems

SIGV4 = APIKey(
    name="Authorization",
    in_=APIKeyIn.header,
    description="AWS Signature Version 4 (service execute-api); callers are IAM principals.",
)


# What every operation that knows its caller may answer, whatever the route (the resolver, the
# tenancy check, the quota and the store answer these before or around the route's own work).
_CALLER_ERRORS = {
    "400": "Bad Request: a malformed header (local mode: an invalid X-Punctual-Tenant), or a query"
    " parameter the operation does not take",
    "403": "Forbidden: the caller cannot be a tenant (a federated user)",
    "429": "Too Many Requests: the tenant's API quota (Retry-After says when to retry)",
    "503": "Service Unavailable: another request was changing the same items, or storage is"
    " throttling or could not be reached; nothing was changed (Retry-After says when to retry); or"
    " the deployment is misconfigured",
    "504": "Gateway Timeout: storage did not answer in time; the request may have been done (read"
    " before repeating a change)",
}
_UNKNOWN_QUERY = "Bad Request: a query parameter the operation does not take"
# The operations that take a JSON body: the resolver refuses one too large (413) or not JSON (415).
_BODY_ERRORS = {
    "413": "Content Too Large: the request body is over its limit",
    "415": "Unsupported Media Type: send the body as application/json",
}
_TAKES_BODY = frozenset({"createJob", "replaceJob", "putCalendar", "createJobBatch", "backfillJob"})
# The response headers a client acts on (QA: none was declared, so a client generated from the
# document could not read them): which operation's answers carry which, by status.
HEADERS: dict[str, dict[str, Any]] = {
    "ETag": {
        "description": 'The version of the job or calendar, quoted ("3"): send it back in If-Match',
        "schema": {"type": "string", "pattern": '^"[0-9]{1,12}"$'},
    },
    "Location": {
        "description": "The URL of what the request created or queued",
        "schema": {"type": "string", "format": "uri"},
    },
    "Retry-After": {
        "description": "How many seconds to wait before sending the request again",
        "schema": {"type": "integer", "minimum": 0},
    },
}
_ETAG = {
    "createJob": ("201",),
    "getJob": ("200",),
    "replaceJob": ("200", "201"),
    "pauseJob": ("200",),
    "resumeJob": ("200",),
    "rotateSigningSecret": ("200",),
    "putCalendar": ("200", "201"),
    "getCalendar": ("200",),
}
_LOCATION = {
    "createJob": ("201",),
    "replaceJob": ("201",),
    "triggerJob": ("202",),
    "backfillJob": ("202",),
    "putCalendar": ("201",),
}
# A 412 names the version the resource is at; a 409 may be an Idempotency-Key's first request
# still running (only where one is taken); 429 and 503 say when to come back.
_HEADERS_BY_STATUS = {
    "412": ("ETag",),
    "409": ("Retry-After",),
    "429": ("Retry-After",),
    "503": ("Retry-After",),
}
# What If-Match takes (punctual.api.conditional.listed_versions): *, or versions as ETag gives
# them ("3", 3 or W/"3"), comma-separated.
# Empty list elements are ignored (RFC 9110 5.6.1), so commas may repeat.
_VERSION = '(W/)?"?[0-9]{1,12}"?'
IF_MATCH_PATTERN = rf"^\s*(\*\s*|[\s,]*{_VERSION}(\s*,[\s,]*{_VERSION})*[\s,]*)$"


def finished_document(text: str) -> dict[str, Any]:
    """The document Powertools generated (``text``) with this API's error answers, response
    headers and links."""
    document: dict[str, Any] = json.loads(text)
    # Powertools documents its own 422/500 shapes; this API answers every error as a problem.
    problem = {"content": {problems.PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
    for operation in (op for item in document["paths"].values() for op in item.values()):
        responses = operation["responses"]
        name = operation.get("operationId", "")
        responses["422"] = {"description": "Unprocessable Content: invalid input", **problem}
        if operation.get("tags") != ["meta"]:  # the routes that know the caller
            for status, description in _CALLER_ERRORS.items():
                responses.setdefault(status, {"description": description, **problem})
        responses.setdefault("400", {"description": _UNKNOWN_QUERY, **problem})
        if name in _TAKES_BODY:
            for status, description in _BODY_ERRORS.items():
                responses.setdefault(status, {"description": description, **problem})
        responses["500"] = {"description": "Internal error (a bug: never expected)", **problem}
        responses.get("204", {}).pop("content", None)  # 204 has no body
        headers_in = {
            p.get("name", "").lower() for p in operation.get("parameters", []) if p.get("in") == "header"
        }
        _declare_headers(name, responses, retried_409="idempotency-key" in headers_in)
        for parameter in operation.get("parameters", []):
            if parameter.get("in") == "header" and parameter.get("name", "").lower() == "if-match":
                parameter["schema"] = {**parameter.get("schema", {}), "pattern": IF_MATCH_PATTERN}
        operation["responses"] = dict(sorted(responses.items()))
    for name in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
        document["components"]["schemas"].pop(name, None)
    document["components"]["headers"] = HEADERS
    add_links(document)
    return document


def _declare_headers(operation: str, responses: dict[str, Any], retried_409: bool) -> None:
    """``retried_409``: the operation takes an Idempotency-Key, whose first request still running
    is a 409 with Retry-After (other conflicts are not retried as they are)."""
    for status, response in responses.items():
        names = list(_HEADERS_BY_STATUS.get(status, ()))
        if status == "409" and not retried_409:
            names.remove("Retry-After")
        names += ["ETag"] if status in _ETAG.get(operation, ()) else []
        names += ["Location"] if status in _LOCATION.get(operation, ()) else []
        if names:
            response["headers"] = {name: {"$ref": f"#/components/headers/{name}"} for name in names}


# What a client can do next with what an answer names (OpenAPI links; schemathesis follows them).
_JOB_LINKS = {
    "GetJob": "getJob",
    "ReplaceJob": "replaceJob",
    "DeleteJob": "deleteJob",
    "PauseJob": "pauseJob",
    "ResumeJob": "resumeJob",
    "TriggerJob": "triggerJob",
    "RotateSigningSecret": "rotateSigningSecret",
    "ListExecutions": "listExecutions",
    "BackfillJob": "backfillJob",
}


def add_links(document: dict[str, Any]) -> None:
    operations = {
        op["operationId"]: op
        for item in document["paths"].values()
        for op in item.values()
        if "operationId" in op
    }
    job_links = {
        name: {
            "operationId": target,
            "parameters": {"job_id": "$response.body#/id"},
            "description": f"{target} on the job this answer shows",
        }
        for name, target in _JOB_LINKS.items()
    }
    for source, status in (("createJob", "201"), ("getJob", "200"), ("replaceJob", "200")):
        operations[source]["responses"][status]["links"] = job_links
    operations["backfillJob"]["responses"]["202"]["links"] = {
        name: {
            "operationId": target,
            "parameters": {"job_id": "$response.body#/job_id", "backfill_id": "$response.body#/id"},
            "description": f"{target} on the backfill this answer shows",
        }
        for name, target in (("GetBackfill", "getBackfill"), ("CancelBackfill", "cancelBackfill"))
    }
    operations["putCalendar"]["responses"]["200"]["links"] = {
        "GetCalendar": {
            "operationId": "getCalendar",
            "parameters": {"name": "$response.body#/name"},
            "description": "The calendar this answer shows",
        }
    }
    operations["triggerJob"]["responses"]["202"]["links"] = {
        "GetExecution": {
            "operationId": "getExecution",
            "parameters": {"job_id": "$response.body#/job_id", "slot": "$response.body#/slot"},
            "description": "The execution of the slot just queued (404 until a worker starts it)",
        }
    }
