"""The API's resolver: what no route should see is answered before routing.

Wrong methods (405 with ``Allow``), ``HEAD`` and ``OPTIONS``, bodies that are not UTF-8 text,
too large, not JSON or nested too deeply, and EventBridge Scheduler's paths (handed to
:mod:`punctual.api.scheduler`); and the URL the caller reached the API at.
"""

import base64
import binascii
import json
import re
import sys
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.api import problems, scheduler
from punctual.api.batch import BATCH_MAX_BODY_BYTES, BATCH_PATH
from punctual.models import (
    MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_DEPTH,
    KeyGivenTwice,
    unique_keys,
)

# The job payload may be 256 KB; the rest of a spec (name, tags, headers) gets 64 KB more.
MAX_BODY_BYTES = MAX_PAYLOAD_BYTES + 64 * 1024

# The POST routes that take no body (docs/api.md: one sent is ignored), as GET and DELETE take none.
_TAKES_NO_BODY = re.compile(r"^/v1/jobs/[^/]+/(?:pause|resume|trigger|rotate-secret)/?\Z")
_JOB_SPEC_PATH = re.compile(r"^/v1/jobs(?:/[^/]+)?/?\Z")  # a body that is a job spec (POST, PUT)


def takes_no_body(method: str, path: str) -> bool:
    """Whether a request's body is ignored: GET, DELETE, and the POST actions (QA: a body some
    HTTP clients attach to a DELETE was 415, undeclared, where the actions ignore theirs)."""
    return method in ("GET", "DELETE") or (method == "POST" and bool(_TAKES_NO_BODY.match(path)))


def body_limit(path: str) -> tuple[int, str]:
    """The body size limit of a route and what it says of it (QA: the batch's 5 MB did not hold
    at its path with a trailing slash, and a backfill's 413 spoke of job payloads)."""
    if path.rstrip("/") == BATCH_PATH:
        return BATCH_MAX_BODY_BYTES, "a batch's limit"
    if _JOB_SPEC_PATH.match(path):
        return MAX_BODY_BYTES, f"a job payload may have {MAX_PAYLOAD_BYTES}"
    return MAX_BODY_BYTES, "this route's limit"


def header_of(event: dict[str, Any], name: str) -> str | None:
    for key, value in (event.get("headers") or {}).items():
        if key.lower() == name:
            return str(value)
    return None


_HOST_RE = re.compile(r"^[A-Za-z0-9.-]{1,253}(:\d{1,5})?\Z|^\[[0-9A-Fa-f:.]{2,45}\](:\d{1,5})?\Z")
_PREFIX_RE = re.compile(r"^(/[A-Za-z0-9._~-]+)*\Z")


def base_url(event: dict[str, Any]) -> str:
    """The URL the caller reached this API at, up to (not including) ``/v1``.

    Behind API Gateway's own domain that includes the stage (``/prod``), behind a custom
    domain its base path: whatever ``requestContext.path`` has in front of the route's
    path. Scheme and host are the ones the caller used (``X-Forwarded-Proto``, ``Host``).
    """
    context = event.get("requestContext") or {}
    host = header_of(event, "host") or ""
    if not _HOST_RE.match(host):
        host = str(context.get("domainName") or "localhost")
    proto = (header_of(event, "x-forwarded-proto") or "").split(",", 1)[0].strip().lower()
    if proto not in ("http", "https"):
        proto = "https" if host.endswith(".amazonaws.com") else "http"
    path, full = str(event.get("path") or ""), str(context.get("path") or "")
    prefix = full[: -len(path)] if path and full.endswith(path) else ""
    return f"{proto}://{host}{prefix if _PREFIX_RE.match(prefix) else ''}"


def _is_json(content_type: str) -> bool:
    """Only application/json (any parameters): a ``+json`` type says another format (QA:
    ``application/merge-patch+json`` passed here and got the validation layer's vaguer 415; as a
    patch it would have replaced the whole spec)."""
    return content_type.split(";", 1)[0].strip().lower() in ("", "application/json")


def _unreadable(body: str) -> str | None:
    """Why the JSON parser gives up on well-formed ``body`` (so it never raises mid-route), or why
    it is ambiguous (a key given twice in one object), or None."""
    try:
        json.loads(body, object_pairs_hook=unique_keys)
    except KeyGivenTwice as exc:  # (QA30: the last value was taken without a word)
        return f"{exc} of the request body"
    except RecursionError:
        return f"the request body is nested too deeply (a payload may have {MAX_PAYLOAD_DEPTH} levels)"
    except json.JSONDecodeError:
        return None  # malformed: the resolver answers 400 with the parser's message
    except ValueError:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        return f"a number in the request body has more than {sys.get_int_max_str_digits()} digits"
    return None


def _with_header(event: dict[str, Any], name: str, value: str | None) -> dict[str, Any]:
    """``event`` with its header ``name`` (any case) set to ``value`` in both header maps (None:
    without it)."""
    headers = {k: v for k, v in (event.get("headers") or {}).items() if k.lower() != name}
    multi = {k: v for k, v in (event.get("multiValueHeaders") or {}).items() if k.lower() != name}
    if value is not None:
        headers[name], multi[name] = value, [value]
    return {**event, "headers": headers, "multiValueHeaders": multi}


def _without_body(reply: dict[str, Any]) -> dict[str, Any]:
    """A ``GET`` reply as ``HEAD`` answers it: no body, but the ``Content-Length`` the body has."""
    body = str(reply.get("body") or "")
    size = len(base64.b64decode(body)) if reply.get("isBase64Encoded") else len(body.encode())
    out = {**reply, "body": "", "isBase64Encoded": False}
    if size:
        multi = reply.get("multiValueHeaders") or {}
        kept = {name: values for name, values in multi.items() if name.lower() != "content-length"}
        out["multiValueHeaders"] = {**kept, "Content-Length": [str(size)]}
    return out


class PunctualResolver(APIGatewayRestResolver):
    """The resolver, answering what no route should see: wrong methods, bad or oversized bodies.

    * a method a path does not take: 405 with ``Allow`` (``OPTIONS``: 204 with ``Allow``);
    * ``HEAD``: the ``GET`` answer without its body (its ``Content-Length`` kept);
    * a repeated ``If-Match``: one comma-separated list, as RFC 9110 reads it;
    * a body that is not UTF-8 text: 400; larger than the limit: 413; not JSON: 415;
    * ``/schedules``, ``/schedule-groups``, ``/tags/``: EventBridge Scheduler's API
      (:mod:`punctual.api.scheduler`), with that service's error format.
    """

    def allowed_methods(self, path: str) -> list[str]:
        """The methods the routes take on ``path`` (HEAD with GET); empty for an unknown path."""
        methods = {
            route.method for route in self._static_routes + self._dynamic_routes if route.rule.match(path)
        }
        if "GET" in methods:
            methods.add("HEAD")
        return sorted(methods)

    def declared_query(self, method: str, path: str) -> list[str]:
        """The query parameters the route of ``method`` on ``path`` declares (its OpenAPI ones)."""
        for route in self._static_routes + self._dynamic_routes:
            if route.method == method and route.rule.match(path):
                return sorted(param.alias for param in route.dependant.query_params)
        return []

    def declared_headers(self, method: str, path: str) -> set[str]:
        """The headers the route of ``method`` on ``path`` declares (lower case: ``if-match``)."""
        for route in self._static_routes + self._dynamic_routes:
            if route.method == method and route.rule.match(path):
                return {str(param.alias).lower() for param in route.dependant.header_params}
        return set()

    def undeclared_query(self, method: str, path: str, event: dict[str, Any]) -> list[str]:
        """The request's query parameters its route does not take, as sent (QA22: ``?stat=FAILED``
        answered the whole history, as if filtered). A presigned URL's ``X-Amz-*`` (SigV4 in the
        query string, which API Gateway checks) are the gateway's; an unknown path is a 404 anyway."""
        names = {
            *(event.get("multiValueQueryStringParameters") or {}),
            *(event.get("queryStringParameters") or {}),
        }
        names = {name for name in names if not name.lower().startswith("x-amz-")}
        if not names or not self.allowed_methods(path):
            return []
        return sorted(names - set(self.declared_query(method, path)))

    @staticmethod
    def repeated_query(event: dict[str, Any]) -> list[str]:
        """The query parameters the request gives more than once (QA24: ``?limit=5&limit=6`` was
        422 "Input should be a valid integer", and a repeated ``calendars`` "a valid string", naming
        neither the repetition nor which value counts; no route takes a parameter twice)."""
        multi: dict[str, list[str]] = event.get("multiValueQueryStringParameters") or {}
        return sorted(name for name, values in multi.items() if len(values or []) > 1)

    def resolve(self, event: Any, context: LambdaContext) -> dict[str, Any]:
        if not isinstance(event, dict):
            return super().resolve(event, context)
        if scheduler.serves(str(event.get("path") or "")):
            # EventBridge Scheduler's API: its own routes, shapes and error format.
            return scheduler.handle(event, context)
        method = str(event.get("httpMethod") or "").upper()
        allowed = self.allowed_methods(str(event.get("path") or ""))
        if allowed and method not in allowed:
            allow = ", ".join([*allowed, "OPTIONS"])
            if method == "OPTIONS":
                return {"statusCode": 204, "headers": {"Allow": allow}, "multiValueHeaders": {}, "body": ""}
            return problems.proxy_problem(
                405,
                "method-not-allowed",
                "Method not allowed",
                f"{method[:20]} is not allowed here; use {', '.join(allowed)}",
                headers={"Allow": allow},
            )
        if method == "HEAD" and allowed:
            return _without_body(self.resolve({**event, "httpMethod": "GET"}, context))
        path = str(event.get("path") or "")
        if unknown := self.undeclared_query(method, path, event):
            return problems.proxy_problem(
                400,
                "unknown-parameter",
                "Unknown query parameter",
                f"{method[:20]} {path[:200]} takes no query parameter {', '.join(unknown)[:300]}"
                f" (it takes: {', '.join(self.declared_query(method, path)) or 'none'})",
            )
        if header_of(event, "if-none-match") is not None and {"if-match"} == (
            self.declared_headers(method, path) & {"if-match", "if-none-match"}
        ):
            # A change guarded by If-Match only (DELETE, pause, resume, rotate-secret): QA24, it ignored
            # If-None-Match, so "If-None-Match: *" (do it only where there is none) deleted the job.
            return problems.proxy_problem(
                400,
                "invalid-if-none-match",
                "Invalid If-None-Match",
                f"{method[:20]} {path[:200]} takes no If-None-Match (only a PUT that creates does):"
                " guard this change with If-Match",
            )
        if repeated := self.repeated_query(event):
            return problems.proxy_problem(
                400,
                "repeated-parameter",
                "Repeated query parameter",
                f"query parameter {', '.join(repeated)[:300]} is given more than once: give it once"
                " (a list, as calendars, is one comma-separated value)",
            )
        if takes_no_body(method, path):
            # A body is ignored, whatever it holds (review: a binary one was still checked for UTF-8)
            event = _with_header({**event, "body": None, "isBase64Encoded": False}, "content-type", None)
        body = event.get("body")
        limit, about = body_limit(path)
        if isinstance(body, str) and len(body) > limit:
            # Length in characters is a lower bound of the bytes; base64 bodies are larger still.
            return problems.proxy_problem(
                413,
                "payload-too-large",
                "Payload too large",
                f"the request body has more than {limit} bytes ({about})",
            )
        if event.get("isBase64Encoded") and isinstance(body, str):
            # API Gateway base64-encodes a body that is not text; JSON is always UTF-8 text.
            try:
                body = base64.b64decode(body, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return problems.proxy_problem(
                    400, "malformed-body", "Malformed body", "the request body is not UTF-8 text (send JSON)"
                )
            event = {**event, "body": body, "isBase64Encoded": False}
        content_type = header_of(event, "content-type")
        if content_type is not None and not body:
            # An empty body has no media type: never let a form or multipart parser near it.
            event = _with_header(event, "content-type", None)
        elif content_type is not None and not _is_json(content_type):
            return problems.proxy_problem(
                415,
                "unsupported-media-type",
                "Unsupported media type",
                f"send the body as application/json, not {content_type[:80]!r}",
            )
        if isinstance(body, str) and body and (reason := _unreadable(body)) is not None:
            return problems.proxy_problem(422, "validation", "Invalid request", reason)
        if content_type is not None and body and content_type != content_type.lower():
            # Media types are case-insensitive (RFC 9110 8.3.1); the validation layer compares them as is.
            event = _with_header(event, "content-type", content_type.lower())
        if_match = [
            value
            for name, values in (event.get("multiValueHeaders") or {}).items()
            if name.lower() == "if-match"
            for value in values
        ]
        if len(if_match) > 1:
            # Repeated If-Match fields are one list (RFC 9110 5.3); the routes take a single value.
            event = _with_header(event, "if-match", ", ".join(if_match))
        return super().resolve(event, context)
