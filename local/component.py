"""What every local-mode component process shares: start-up, stop signals, a stand-in Lambda context.

A component started by the supervisor (``PUNCTUAL_LOCAL_SUPERVISED=1``) ignores Ctrl-C (the
terminal sends SIGINT to the whole process group; the supervisor then stops components
in order, with SIGTERM) and exits on its own if the supervisor disappears. Run alone,
Ctrl-C stops it. The one every other needs until it has stopped (AWS: moto) is started with
``PUNCTUAL_LOCAL_ORDERED_STOP=1``: it ignores SIGTERM too, which ``timeout``, ``kill -- -PGID`` or
a process manager send to the whole group at once, and stops on the supervisor's SIGUSR1, last;
it stopped at once, so the workers still draining lost it and the state was not saved.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from local.config import REPO_ROOT, LocalConfig, LocalModeError, apply_env
from local.resources import Deployment, function_environment, resources_exist

SUPERVISED_ENV = "PUNCTUAL_LOCAL_SUPERVISED"
# Set by the supervisor for a component it stops with ORDERED_STOP_SIGNAL, after all the others
ORDERED_STOP_ENV = "PUNCTUAL_LOCAL_ORDERED_STOP"
ORDERED_STOP_SIGNAL = signal.SIGUSR1
COMPONENT_ENV = "PUNCTUAL_LOCAL_COMPONENT"
# When the supervisor asked for this start (wall-clock seconds; local.zygote passes it to a fork): a
# component logs how long after it it first did its work (a worker: its first receive).
STARTED_ENV = "PUNCTUAL_LOCAL_START_ASKED_AT"

FUNCTIONS_DIR = REPO_ROOT / "functions"
DEPLOYMENT_WAIT_S = 180.0  # the first start may synthesise the template (~10 s) on a busy machine

log = logging.getLogger("local")


def supervised() -> bool:
    return os.environ.get(SUPERVISED_ENV) == "1"


def stopped_in_order() -> bool:
    """Whether only the supervisor stops this component (:data:`ORDERED_STOP_SIGNAL`), the
    process group's SIGTERM and SIGINT ignored."""
    return supervised() and os.environ.get(ORDERED_STOP_ENV) == "1"


class WrittenAbove(logging.Filter):
    """Keeps off the root's handler a record a logger on its way up already wrote.

    The handlers' Powertools logger (service ``punctual``) writes every ``punctual.*`` record
    as JSON and passes it on to the root. In Lambda, Powertools puts a filter on the root's
    handlers when it is created so that the record is not written twice; a component that sets up
    its logging after importing its handler (a forked worker: its zygote imported it) replaces
    those handlers, and every handler line came out twice. This filter does the same for every
    logger, whenever it was set up. A ``NullHandler`` (botocore's, urllib3's) writes nothing and
    does not count.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None and logger is not logging.root:
            if any(not isinstance(handler, logging.NullHandler) for handler in logger.handlers):
                return False
            logger = logger.parent if logger.propagate else None
        return True


def configure_logging(config: LocalConfig) -> None:
    """Plain ``LEVEL logger: message`` lines on stderr; the supervisor adds time and component."""
    logging.basicConfig(
        level=getattr(logging, config.log_level.upper(), logging.INFO),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    for handler in logging.root.handlers:
        handler.addFilter(WrittenAbove())
    for noisy in ("botocore", "boto3", "urllib3", "werkzeug", "moto"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # A minute in which a poller released nothing has no metrics: not worth a warning here.
    warnings.filterwarnings("ignore", message="No application metrics to publish")


def stop_event() -> threading.Event:
    """An event set by SIGTERM (and by SIGINT when run alone, or when the supervisor is gone; by
    the supervisor's SIGUSR1 alone for a component it stops last, :func:`stopped_in_order`)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    if stopped_in_order():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(ORDERED_STOP_SIGNAL, on_signal)
        _watch_parent(stop)
        return stop
    signal.signal(signal.SIGTERM, on_signal)
    if supervised():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _watch_parent(stop)
    else:
        signal.signal(signal.SIGINT, on_signal)
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # (nohup: asked to outlive it)
            signal.signal(signal.SIGHUP, on_signal)  # its terminal closed
    return stop


def _watch_parent(stop: threading.Event, grace_s: float = 15.0) -> None:
    """Stop when the supervisor dies (this process is re-parented): no orphans left running."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        log.warning("the supervisor is gone: stopping")
        stop.set()
        time.sleep(grace_s)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def write_pid(config: LocalConfig, name: str) -> None:
    config.run_dir.mkdir(parents=True, exist_ok=True)
    config.pid_file(name).write_text(f"{os.getpid()}\n")


def read_deployment(config: LocalConfig) -> Deployment | None:
    try:
        return Deployment.read(config.deployment_file)
    except (OSError, ValueError, TypeError):
        return None


class StoppedWaiting(Exception):
    """The component was asked to stop (Ctrl-C run alone, the supervisor's SIGTERM) while it
    waited for local AWS: it ends there, exit 0, as it would once running."""


def wait_for_deployment(
    config: LocalConfig, timeout_s: float = DEPLOYMENT_WAIT_S, stop: threading.Event | None = None
) -> Deployment:
    """Wait until the ``aws`` component has created the resources, and return their description;
    :class:`StoppedWaiting` once ``stop`` is set (a stop signal went unheeded for up to 180 s)."""
    import boto3

    stop = stop or threading.Event()  # (none: never set)
    apply_env(config.aws_env())
    dynamodb = boto3.client("dynamodb")
    sqs = boto3.client("sqs")
    deadline = time.monotonic() + timeout_s
    while True:
        deployment = read_deployment(config)
        current = deployment is not None and deployment.endpoint == config.aws_endpoint
        if deployment is not None and current and resources_exist(deployment, dynamodb, sqs):
            dynamodb.close()  # no connection left open (a zygote forks after this: local.zygote)
            sqs.close()
            return deployment
        if time.monotonic() >= deadline:
            raise LocalModeError(
                f"no local AWS at {config.aws_endpoint} after {timeout_s:.0f}s "
                "(start it with `punctual-local aws`, or run everything with `punctual-local up`)"
            )
        if stop.wait(0.3):
            raise StoppedWaiting


def prepare(
    config: LocalConfig, base_env: dict[str, str] | None = None, stop: threading.Event | None = None
) -> Deployment:
    """Wait for the resources, then set this process's ``AWS_*`` and ``PUNCTUAL_*`` environment.

    Must run before anything imports a handler: Settings and Powertools read the
    environment once.
    """
    deployment = wait_for_deployment(config, stop=stop)
    apply_env(config.aws_env())
    apply_env(
        function_environment(config, deployment, base_env if base_env is not None else deployment.environment)
    )
    return deployment


def load_handler(function: str) -> ModuleType:
    """Import ``functions/<function>/handler.py`` the way the Lambda runtime does (module ``handler``)."""
    directory = FUNCTIONS_DIR / function
    if not (directory / "handler.py").is_file():
        raise LocalModeError(f"{directory}/handler.py does not exist")
    sys.path.insert(0, str(directory))
    sys.modules.pop("handler", None)
    return importlib.import_module("handler")


@dataclass
class LambdaContext:
    """A stand-in for the Lambda context object: what Powertools and the handlers read.

    ``get_remaining_time_in_millis`` counts down from the function's timeout in the
    template; :meth:`cut` makes it zero at once (local mode stopping), which the poller
    handler treats as the end of its invocation.
    """

    function_name: str
    timeout_s: float
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_stream_name: str = "local"
    started: float = field(default_factory=time.monotonic)
    _cut: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        if self._cut.is_set():
            return 0
        return max(0, int((self.timeout_s - (time.monotonic() - self.started)) * 1000))

    def cut(self) -> None:
        self._cut.set()


def run_component(name: str, body: Any, config: LocalConfig) -> int:
    """Run ``body(config, stop)`` as component ``name``: logging, pid file, errors as one line."""
    configure_logging(config)
    os.environ[COMPONENT_ENV] = name
    from local.chaos.faults.throttle import install_from_env

    install_from_env()  # PUNCTUAL_FAULT_THROTTLE_RATE: chaos by hand; a no-op unless asked for
    from local.chaos.faults import stall

    stall.install_from_env(name)  # LOCAL_CHAOS_STALL: one call that hangs (a no-op unless asked for)
    write_pid(config, name)
    stop = stop_event()
    try:
        body(config, stop)
    except LocalModeError as exc:
        log.error("%s", exc)
        return 2
    except (KeyboardInterrupt, StoppedWaiting):
        return 0
    finally:
        # Stopped: a further SIGTERM (the supervisor's, after the group's) is nothing. Python's
        # finalization gives a signal it had a handler for its default action back, so one arriving
        # as the process exits killed it ("stopped auditor (killed by SIGTERM)", QA31); an ignored
        # one stays ignored.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        pid_file = config.pid_file(name)
        try:
            if pid_file.read_text().strip() == str(os.getpid()):
                pid_file.unlink()
        except OSError:
            pass
    return 0


def repo_path(*parts: str) -> Path:
    return REPO_ROOT.joinpath(*parts)
