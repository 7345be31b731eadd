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


def finished_document(text: str) -> dict[str, Any]:
    """The document Powertools generated (``text``) with this API's error answers and links."""
    document: dict[str, Any] = json.loads(text)
    # Powertools documents its own 422/500 shapes; this API answers every error as a problem.
    problem = {"content": {problems.PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
    for operation in (op for item in document["paths"].values() for op in item.values()):
        responses = operation["responses"]
        responses["422"] = {"description": "Unprocessable Content: invalid input", **problem}
        if operation.get("tags") not in (["meta"], ["schedules"]):  # the routes that know the caller
            responses["429"] = {"description": "Too Many Requests: the tenant's API quota", **problem}
        responses["500"] = {"description": "Internal error (a bug: never expected)", **problem}
        responses.get("204", {}).pop("content", None)  # 204 has no body
    for name in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
        document["components"]["schemas"].pop(name, None)
    add_links(document)
    return document


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
