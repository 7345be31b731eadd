"""Errors as EventBridge Scheduler answers them, so botocore parses the code and the message.

REST-JSON: the HTTP status of the error shape, the header ``x-amzn-ErrorType: <Code>`` and a
JSON body ``{"Message": "..."}``. botocore takes ``Error.Code`` from the header and
``Error.Message`` from the body; the statuses are the service model's (ValidationException
400, ResourceNotFoundException 404, ConflictException 409, ServiceQuotaExceededException 402,
ThrottlingException 429, InternalServerException 500).
"""

from __future__ import annotations

import json
from typing import Any

STATUS = {
    "ValidationException": 400,
    "ResourceNotFoundException": 404,
    "ConflictException": 409,
    "ServiceQuotaExceededException": 402,
    "ThrottlingException": 429,
    "InternalServerException": 500,
    # Not in the service model: a request without a caller identity (never behind IAM auth).
    "AccessDeniedException": 403,
}


class SchedulerError(Exception):
    """An error the scheduler API answers; ``code`` is one of :data:`STATUS`."""

    def __init__(self, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        if code not in STATUS:
            raise ValueError(f"unknown error code {code!r}")
        self.code = code
        self.message = message
        self.headers = headers or {}


def invalid(message: str) -> SchedulerError:
    return SchedulerError("ValidationException", message)


def not_found(message: str) -> SchedulerError:
    return SchedulerError("ResourceNotFoundException", message)


def conflict(message: str) -> SchedulerError:
    return SchedulerError("ConflictException", message)


def quota(message: str) -> SchedulerError:
    return SchedulerError("ServiceQuotaExceededException", message)


def error_reply(error: SchedulerError, request_id: str) -> dict[str, Any]:
    """The API Gateway proxy reply of ``error``."""
    return {
        "statusCode": STATUS[error.code],
        "headers": {
            "Content-Type": "application/json",
            "x-amzn-ErrorType": error.code,
            "x-amzn-RequestId": request_id,
            **error.headers,
        },
        "multiValueHeaders": {},
        "body": json.dumps({"Message": error.message}),
        "isBase64Encoded": False,
    }


def ok_reply(body: dict[str, Any], request_id: str) -> dict[str, Any]:
    """A 200 reply with a JSON body (every operation of the service answers 200)."""
    return {
        "statusCode": 200,
        "headers": {"Content-Type": "application/json", "x-amzn-RequestId": request_id},
        "multiValueHeaders": {},
        "body": json.dumps(body, separators=(",", ":")),
        "isBase64Encoded": False,
    }
