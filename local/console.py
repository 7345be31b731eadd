"""Local mode's console page: ``GET /console`` on the API port, beside the API routes.

The API component serves its handler through :mod:`local.api_gateway`; this wraps that
handler so that ``/console`` (with ``tenant``, ``tag``, ``cursor``, ``page`` in the query
string) is answered by the console's renderer (:func:`punctual.console.service.local_page`, the
code the CloudWatch widget runs) and every other request goes to the API as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

CONSOLE_PATH = "/console"

ProxyHandler = Callable[[dict[str, Any], Any], Mapping[str, Any]]


def with_console(api: ProxyHandler, path: str = CONSOLE_PATH) -> ProxyHandler:
    """``api`` with ``GET``/``HEAD`` of ``path`` answered by the console page."""

    def handler(event: dict[str, Any], context: Any) -> Mapping[str, Any]:
        if event.get("path") not in (path, path + "/"):
            return api(event, context)
        if event.get("httpMethod") not in ("GET", "HEAD"):
            return {
                "statusCode": 405,
                "headers": {"Allow": "GET, HEAD", "Content-Type": "text/plain; charset=utf-8"},
                "body": "GET the console\n",
            }
        from punctual.console.render import DOCUMENT_HEADERS
        from punctual.console.service import local_page

        status, html = local_page(event.get("queryStringParameters") or {}, path=path)
        return {
            "statusCode": status,
            "headers": {
                "Content-Type": "text/html; charset=utf-8",
                "Cache-Control": "no-store",
                **DOCUMENT_HEADERS,
            },
            "body": html,
        }

    return handler
