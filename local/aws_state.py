"""What the ``aws`` component keeps across a clean stop: moto's state, saved when it stops and
loaded when it starts again (QA: stopping ``make run`` with Ctrl-C and starting it again lost
every job registered, and so every later slot, without a word).

moto keeps each service's state in ``moto.<service>.models.<service>_backends`` (account ->
Region -> backend). The backends of every service this process has served are pickled (their
locks are made anew on load) to ``.local/aws-state.pickle`` as the component stops, when the
supervisor stops it last, after the pollers, the API and the workers (it says so in
:data:`STOPPED_IN_ORDER`): nothing writes after it, so the saved state is the last one. A start
loads it (and removes the file, so a crash later never brings back an older state: a run that
crashes starts empty, as before) and the pollers catch up the minutes they missed while stopped,
under each job's catch-up policy. ``punctual-local up --fresh`` (``make run FRESH=1``) starts
empty. A state this moto cannot read (another version) is set aside, named in the log, and the
start is empty.
"""

from __future__ import annotations

import copyreg
import json
import logging
import pickle
import re
import sys
import threading
from pathlib import Path
from typing import Any

from local.config import LocalModeError

log = logging.getLogger("local.aws")

STATE_FILE = "aws-state.pickle"
LAYOUT_FILE = "aws-state.layout.json"  # the table's shard counts, beside the state
# Written by the supervisor once every other component has exited, as it stops AWS: without it
# (a crash, AWS stopped while others still ran) the state is not saved: it may miss a last write.
STOPPED_IN_ORDER = "stopped-in-order"
_BACKENDS = re.compile(r"moto\.(\w+)\.models")


def _lock_reducers() -> None:
    """Locks pickle as new, unheld locks (a stopped server holds none)."""
    copyreg.pickle(type(threading.RLock()), lambda _: (threading.RLock, ()))
    copyreg.pickle(type(threading.Lock()), lambda _: (threading.Lock, ()))


def _backend_dicts() -> dict[str, Any]:
    """Every loaded service's backends: {service: BackendDict}."""
    found = {}
    for name, module in list(sys.modules.items()):
        match = _BACKENDS.fullmatch(name)
        backends = getattr(module, f"{match.group(1)}_backends", None) if match else None
        if backends is not None and hasattr(backends, "items"):
            found[match.group(1)] = backends  # type: ignore[union-attr]
    return found


def save(path: Path, layout: tuple[int, int] | None = None) -> int:
    """Pickle every served service's backends to ``path`` (atomically); returns how many services.
    ``layout``, the far and near shard counts of the table's timers, is kept beside it
    (:func:`refuse_other_layout`)."""
    _lock_reducers()
    state: dict[str, dict[str, dict[str, Any]]] = {}
    for service, backends in _backend_dicts().items():
        regions = {account: dict(by_region.items()) for account, by_region in backends.items()}
        regions = {account: by_region for account, by_region in regions.items() if by_region}
        if regions:
            state[service] = regions
    try:
        data = pickle.dumps(state)  # the usual case: one pass over the whole state
    except Exception:
        for service in list(state):  # find the services whose state does not pickle
            try:
                pickle.dumps(state[service])
            except Exception as exc:  # not kept, and said so
                log.warning("moto's %s state cannot be kept across the stop (%s)", service, exc)
                del state[service]
        data = pickle.dumps(state)
    layout_file = _layout_file(path)
    if layout is None:
        layout_file.unlink(missing_ok=True)
    else:
        layout_file.write_text(json.dumps({"shards": layout[0], "near_shards": layout[1]}))
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    partial.replace(path)
    return len(state)


def _layout_file(path: Path) -> Path:
    return path.with_name(LAYOUT_FILE)


def refuse_other_layout(path: Path, shards: int, near_shards: int) -> None:
    """Refuse to load the state saved in ``path`` with other shard counts than the table's timers
    are laid out in (QA22: ``up --shards 8`` after a stop with 4 started, and then every poller
    failed each minute and every job write was a 503, the table's counts being fixed)."""
    layout_file = _layout_file(path)
    if not (path.exists() and layout_file.exists()):
        return
    try:
        saved = json.loads(layout_file.read_text())
        have = int(saved["shards"]), int(saved["near_shards"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # not ours to judge: every function still checks the table's own counts
    if have != (shards, near_shards):
        raise LocalModeError(
            f"the AWS state saved in {path.parent} holds timers laid out in {have[0]} far / {have[1]}"
            f" near shards (shard counts are fixed when a table is first used): start with --shards"
            f" {have[0]} --near-shards {have[1]}, or with --fresh to start empty"
        )


def load(path: Path) -> list[str]:
    """Put the state saved in ``path`` back into moto's backends and remove the file; returns
    the services restored ([] when there is no file, or it cannot be read: then it is set aside)."""
    if not path.exists():
        return []
    try:
        state = pickle.loads(path.read_bytes())
    except Exception as exc:
        aside = path.with_suffix(".unreadable")
        path.replace(aside)
        log.warning("the saved AWS state could not be read (%s): starting empty; it is in %s", exc, aside)
        return []
    import importlib

    for service, regions in state.items():
        module = importlib.import_module(f"moto.{service}.models")
        backends = getattr(module, f"{service}_backends")
        for account, by_region in regions.items():
            for region, backend in by_region.items():
                backends[account][region] = backend
    path.unlink()
    return sorted(state)
