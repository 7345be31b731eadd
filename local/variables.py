"""Every ``PUNCTUAL_*`` variable a local mode's processes read: the names ``--set`` may give.

``punctual-local up --set NAME=VALUE`` hands the variable to every component; a name nothing
reads (``PUNCTUAL_LEASE=12`` for ``PUNCTUAL_LEASE_S``) did nothing, silently. The names are the
settings models' fields (the runtime's, the console's, the ECS worker service's, local mode's own),
each read as its prefix plus the field's name in capitals (:func:`punctual.runtime.settings.read_env`),
and the variables read outside them: the fault injection's and the supervisor's (a test greps the
tree for every name read, so one added elsewhere must be named here).
"""

from __future__ import annotations

import difflib
from dataclasses import fields

# (model's prefix, model): imported when asked (the CLI builds its parser on every start)
_MODELS = (
    ("PUNCTUAL_", "punctual.runtime.settings", "Settings"),
    ("PUNCTUAL_CONSOLE_", "punctual.console.widget", "ConsoleSettings"),
    ("PUNCTUAL_WORKER_", "punctual.execution.worker_service", "ServiceSettings"),
)


def known_variables() -> frozenset[str]:
    """Every ``PUNCTUAL_*`` name the code of local mode's processes reads."""
    import importlib

    from local.chaos.faults.throttle import LOG_DIR_ENV, RATE_ENV
    from local.component import COMPONENT_ENV, ORDERED_STOP_ENV, STARTED_ENV, SUPERVISED_ENV
    from local.config import LocalConfig
    from local.zygote import ZYGOTE_ENV

    names = {RATE_ENV, LOG_DIR_ENV, COMPONENT_ENV, ORDERED_STOP_ENV, STARTED_ENV, SUPERVISED_ENV, ZYGOTE_ENV}
    for prefix, module, model in _MODELS:
        names.update(
            prefix + name.upper() for name in getattr(importlib.import_module(module), model).model_fields
        )
    names.update("PUNCTUAL_LOCAL_" + item.name.upper() for item in fields(LocalConfig))
    return frozenset(names)


def unknown_variable(name: str) -> str | None:
    """Why ``--set`` refuses ``name`` (nothing reads it, with the close names that are read), or None."""
    known = known_variables()
    if name in known:
        return None
    close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.75)
    hint = f"; did you mean {', '.join(close)}?" if close else " (the settings: docs/settings.md)"
    return f"no setting is named {name}: nothing would read it{hint}"
