"""The console's two entry points, built once per container from the environment.

:func:`widget_html` answers a CloudWatch custom widget invocation (``functions/console``);
:func:`local_page` answers local mode's ``GET /console``. Both read through the same store
(:attr:`punctual.runtime.composition.Container.store`) and render with the same code; only navigation differs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from punctual.console.render import (
    Links,
    LocalLinks,
    WidgetLinks,
    render_console,
    render_document,
    render_error,
)
from punctual.console.view import ConsoleQuery, ConsoleQueryError, ConsoleView, build_view
from punctual.console.widget import ConsoleSettings, merged_params, query_from
from punctual.runtime.clock import SystemClock
from punctual.store.base import JobStore

logger = logging.getLogger(__name__)

# What reading the table can raise when DynamoDB throttles, refuses or cannot be reached (through
# the SDK's retries): a page that says so, never the function's error (QA24: local mode answered
# a 502 JSON document, which has no reload, so the page stayed on it once the table was back).
STORAGE_ERRORS = (ClientError, BotoCoreError)


def storage_trouble(exc: ClientError | BotoCoreError, retry: str) -> str:
    """What the page says when the jobs could not be read (``retry``: when it is read again)."""
    logger.warning("console: the jobs could not be read: %s", exc)
    code = exc.response.get("Error", {}).get("Code") if isinstance(exc, ClientError) else None
    return f"the jobs could not be read from storage ({code or type(exc).__name__}); {retry}"


@dataclass(frozen=True)
class ConsoleServices:
    store: JobStore
    settings: ConsoleSettings


_lock = threading.Lock()
_services: ConsoleServices | None = None


def services() -> ConsoleServices:
    """The container's store and settings, built on first use from ``PUNCTUAL_*`` variables."""
    global _services
    with _lock:
        if _services is None:
            from punctual.runtime.composition import container

            _services = ConsoleServices(container().store, ConsoleSettings.from_env())
        return _services


def use_services(built: ConsoleServices | None) -> None:
    """Install ``built`` (tests); None rebuilds from the environment on next use."""
    global _services
    if built is None:
        from punctual.runtime import composition

        composition.reset()  # the environment may have changed: read it again
    with _lock:
        _services = built


def _view(params: Mapping[str, Any], now: datetime | None) -> ConsoleView:
    """Read the page ``params`` ask for (raises ConsoleQueryError for an unusable one)."""
    built = services()
    return build_view(
        built.store,
        query_from(params, built.settings),
        now or SystemClock().now(),
        history_limit=built.settings.history_limit,
        strip_cells=built.settings.strip_cells,
    )


def refused(exc: ConsoleQueryError, links: Links) -> str:
    """The error of an unusable parameter, with the filter form again (on the console's tenant)."""
    settings = services().settings
    try:
        form = links.filter_form(ConsoleQuery(settings.tenant, page_size=settings.page_size))
    except ConsoleQueryError:  # the configured tenant is unusable itself: the error says so
        form = ""
    return render_error(str(exc), form)


def widget_html(event: Mapping[str, Any], endpoint: str, now: datetime | None = None) -> str:
    """The widget's HTML for one invocation.

    Parameters
    ----------
    event
        What CloudWatch sends: ``widgetContext`` and the calling action's parameters.
    endpoint
        This function's ARN: the ``<cwdb-action>`` controls call it again.
    now
        The instant of the render (default: the system clock).

    Returns
    -------
    str
        An HTML fragment; a parameter error is shown in it, never raised.
    """
    links = WidgetLinks(endpoint, services().settings.page_size)
    try:
        view = _view(merged_params(event), now)
    except ConsoleQueryError as exc:
        return refused(exc, links)
    except STORAGE_ERRORS as exc:
        return render_error(storage_trouble(exc, "refresh the widget to read them again"))
    return render_console(view, links)


def local_page(
    params: Mapping[str, Any], now: datetime | None = None, path: str = "/console"
) -> tuple[int, str]:
    """Local mode's whole page for query parameters ``params``: (HTTP status, HTML)."""
    # ``refresh=0`` stops the page reloading (QA24: each reload wiped what the operator was typing
    # into the tenant and tag filters); its links and form keep it stopped
    stopped = str(params.get("refresh", "")).strip() == "0"
    links = LocalLinks(path, services().settings.page_size, stopped=stopped)
    try:
        view = _view(params, now)
    except ConsoleQueryError as exc:
        return 400, render_document(refused(exc, links))
    except STORAGE_ERRORS as exc:  # 503, and the page reloads as it does when it shows the jobs
        refresh_s = services().settings.refresh_s
        message = storage_trouble(exc, f"this page reads them again in {refresh_s} s")
        return 503, render_document(render_error(message), refresh_s=refresh_s)
    page = render_console(view, links)
    # with a link to start the reloading again, or to stop it
    if stopped:
        start = LocalLinks(path, links.page_size).href(view.query)
        return 200, render_document(page, toggle=("start", start))
    refresh_s = services().settings.refresh_s
    return 200, render_document(
        page, refresh_s=refresh_s, toggle=("stop, to type a filter", links.href(view.query) + "&refresh=0")
    )
