"""The CloudWatch custom widget contract, and the console's configuration.

CloudWatch invokes the widget's function with an event holding ``widgetContext`` (dashboard,
theme, time range, ``params``: the widget's own parameters, and ``forms.all``: the values of
the forms in the widget's HTML when a ``<cwdb-action>`` calls it) plus, at the top level, the
JSON parameters of the ``<cwdb-action>`` that called it; the function returns HTML as a string.

Parameters, later ones winning: :class:`ConsoleSettings` defaults, the widget's ``params``, the
action's parameters, and, when the action is the filter form's *Apply* (``apply_form``), the
form's tenant and tag (back to the first page). Local mode passes its query string the same
way, as the action's parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from punctual.console.view import (
    DEFAULT_HISTORY_LIMIT,
    DEFAULT_PAGE_SIZE,
    DEFAULT_STRIP_CELLS,
    MAX_PAGE_SIZE,
    ConsoleQuery,
    ConsoleQueryError,
)
from punctual.runtime.settings import read_env

_PREFIX = "PUNCTUAL_CONSOLE_"


class ConsoleSettings(BaseModel):
    """The console function's configuration (``PUNCTUAL_CONSOLE_*``), validated at cold start.

    ``tenant`` is shown when the widget names none: in the cloud a tenant is an IAM principal's
    unique id (``AROA...``, ``AIDA...``; see :mod:`punctual.api.tenancy`), in local mode
    ``default``, or ``demo`` while the demo runs.
    """

    tenant: str = "default"
    page_size: int = Field(default=DEFAULT_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE)
    history_limit: int = Field(default=DEFAULT_HISTORY_LIMIT, ge=1, le=500)
    strip_cells: int = Field(default=DEFAULT_STRIP_CELLS, ge=1, le=100)
    refresh_s: int = Field(default=5, ge=1, le=3600)  # local mode's page reload

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ConsoleSettings:
        return read_env(cls, _PREFIX, environ)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _number(value: Any, name: str, default: int) -> int:
    if value in (None, ""):
        return default
    try:
        return int(str(value))
    except ValueError:
        raise ConsoleQueryError(f"{name} must be a whole number") from None


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConsoleQueryError(f"{what} must be a JSON object")
    return value


def merged_params(event: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters a widget invocation carries, later sources winning (see the module doc).

    Raises
    ------
    ConsoleQueryError
        The widget's ``params`` (which the dashboard's author writes) or the forms are not an
        object (QA: ``"params": "x"`` raised, and the widget showed the function's error).
    """
    context = _object(event.get("widgetContext"), "widgetContext")
    params: dict[str, Any] = dict(_object(context.get("params"), "the widget's params"))
    params.update({k: v for k, v in event.items() if k != "widgetContext"})
    if params.pop("apply_form", False):
        form = _object(_object(context.get("forms"), "the widget's forms").get("all"), "the widget's form")
        params.update({"tenant": form.get("tenant"), "tag": form.get("tag"), "cursor": None, "page": 1})
    return params


def query_from(params: Mapping[str, Any], settings: ConsoleSettings) -> ConsoleQuery:
    """The page a set of parameters asks for.

    Raises
    ------
    ConsoleQueryError
        A parameter is not usable.
    """
    return ConsoleQuery(
        tenant=_text(params.get("tenant")) or settings.tenant,
        tag=_text(params.get("tag")),
        cursor=_text(params.get("cursor")),
        page=_number(params.get("page"), "page", 1),
        page_size=_number(params.get("page_size"), "page_size", settings.page_size),
    )
