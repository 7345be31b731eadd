"""Where local mode lives: ports, the state directory, and the environment each component gets.

Every component reads one :class:`LocalConfig` from ``PUNCTUAL_LOCAL_*`` variables (the
supervisor sets them for its children; a component run alone takes the defaults or its
command-line options). The deployment itself (table, queue URLs, function settings) is
written by the ``aws`` component to ``<state>/run/deployment.json`` once the resources
exist; the others wait for it and take their ``PUNCTUAL_*`` settings from there.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STATE_DIR = REPO_ROOT / ".local"
LOOPBACK = "127.0.0.1"
REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
_ENV_PREFIX = "PUNCTUAL_LOCAL_"


class LocalModeError(RuntimeError):
    """Local mode cannot start: a port is taken, the template is missing, AWS never came up."""


@dataclass(frozen=True)
class LocalConfig:
    """The knobs of one local-mode installation.

    Attributes
    ----------
    state_dir
        Logs, pid files, the webhook receiver's records and the deployment description.
    cache_dir
        The synthesised template cache (shared between runs: tests keep their state apart
        but reuse the cache).
    aws_port, api_port, receiver_port
        Loopback ports; 0 means "pick a free one" (the supervisor picks once, so a restarted
        component comes back on the same port).
    shard_count, near_shard_count
        Few shards: moto's Query cost grows with the table, and one poller reads them all.
    workers
        Worker Lambda "containers" (processes), each running one batch at a time.
    ecs_workers
        ECS worker tasks (processes: ``ecs-worker``, ``ecs-worker-2``, ...): the deployment's
        ``ecsReadyTasks`` (2), the tasks its ECS service runs while ECS-lane slots are due, so
        that one task's death leaves another to take its messages within the lease.
    api_processes
        API Lambda "containers" (processes), each answering one request at a time as a
        Lambda container does, all on ``api_port`` (``SO_REUSEPORT``: the kernel spreads
        connections over them).
    lease_s
        ``PUNCTUAL_LEASE_S`` when not 0; 0 (the default): the deployment's own (12 s, both lanes),
        so that what chaos measures is what a deployment does.
    pollers
        Poller processes, each running one of every shard group's pollers (the deployment's
        ``pollerReplicas``: 2): ``poller`` runs the first, ``poller-2`` the second.
    moto_patch
        Apply :mod:`local.motopatch` inside the moto server process.
    stale_reads_s, transaction_conflicts
        DynamoDB's behaviours moto lacks (:mod:`local.moto_fidelity`): eventually consistent
        reads answered up to this many seconds behind, and this share of the writes on items
        a transaction holds cancelled for a transaction conflict (0: off, the default).
    attach_aws, name_prefix
        Another Region of a multi-Region local mode (docs/multi-region.md, section 7): use the
        moto server already on ``aws_port`` and its table (moto is strongly consistent, as an MRSC
        global table is) instead of starting one, and create this Region's own queues, named
        ``<name_prefix>-...``; the webhook receiver on ``receiver_port`` is the first Region's.
    audit_interval_s, audit_grace_s
        The chain auditor (:mod:`local.auditor`): how often it checks every job's chain, and
        how long nothing of a chain must happen before it is judged (shorter than the cloud's
        300 s: local mode's pollers run on this machine).
    burst_workers_max, burst_worker_messages_per_s
        Predictive scaling (:mod:`local.scaling`): at most this many ``burst-N`` worker processes
        are started ahead of a planned burst, each counted as draining this many messages a
        second (low on purpose: a burst of a few dozen slots asks for one).
    event_source_workers_max
        The event source's own scaling (:class:`local.scaling.ReactiveWorkers`): while every worker
        process holds a batch, more ``burst-N`` processes start, at most this many in all (those
        past ``burst_workers_max`` forked from a zygote started when first needed; 0: none).
    warm_burst_workers
        Fork each ``burst-N`` from a zygote of its own started with the supervisor (the default);
        off (``PUNCTUAL_LOCAL_WARM_BURST_WORKERS=0``), each starts as a new Python process, as
        before issue 35 (``bench/local_burst_start.py`` compares the two).
    tick_cadence_s
        ``--cloud-cadence``: plan and scale as the cloud's tick does (:mod:`local.cloud_tick`).
    """

    state_dir: Path = DEFAULT_STATE_DIR
    cache_dir: Path = DEFAULT_STATE_DIR / "cache"
    aws_port: int = 4566
    api_port: int = 8080
    receiver_port: int = 8081
    shard_count: int = 4
    near_shard_count: int = 2
    workers: int = 2
    ecs_workers: int = 2  # the deployment's ecsReadyTasks: the ECS service's tasks while slots are due
    api_processes: int = 1
    lease_s: int = 0
    pollers: int = 2
    table_name: str = "punctual"
    name_prefix: str = "punctual"
    log_level: str = "INFO"
    json_logs: bool = False
    moto_patch: bool = True
    stale_reads_s: float = 0.0
    transaction_conflicts: float = 0.0
    burst_workers_max: int = 2
    event_source_workers_max: int = 2
    burst_worker_messages_per_s: int = 3
    warm_burst_workers: bool = True
    attach_aws: bool = False
    table_transactions: bool = True  # False: PUNCTUAL_TABLE_TRANSACTIONS=false (as on an MRSC table)
    audit_interval_s: int = 20
    audit_grace_s: int = 60
    # 0: plan each minute as its pollers start and scale every few seconds (local mode's pace);
    # 60: the cloud's tick (local.cloud_tick): every minute, two minutes ahead, re-planned, with
    # the deployment's burst start lead (75 s).
    tick_cadence_s: int = 0
    template: str = ""  # a template file to use instead of synthesising infra/
    extra: dict[str, str] = field(default_factory=dict)  # further PUNCTUAL_* overrides

    # ------------------------------------------------------------------ paths

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def deployment_file(self) -> Path:
        return self.run_dir / "deployment.json"

    @property
    def receiver_log(self) -> Path:
        return self.run_dir / "receiver.jsonl"

    def pid_file(self, component: str) -> Path:
        return self.run_dir / f"{component}.pid"

    def inflight_file(self, component: str) -> Path:
        return self.run_dir / f"{component}.inflight.json"

    @property
    def aws_endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.aws_port}"

    @property
    def api_url(self) -> str:
        return f"http://{LOOPBACK}:{self.api_port}"

    @property
    def receiver_url(self) -> str:
        return f"http://{LOOPBACK}:{self.receiver_port}"

    # ------------------------------------------------------------------ environment

    def to_env(self) -> dict[str, str]:
        """``PUNCTUAL_LOCAL_*`` variables that give a child process this configuration."""
        out: dict[str, str] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            key = _ENV_PREFIX + item.name.upper()
            if isinstance(value, bool):
                out[key] = "1" if value else "0"
            elif isinstance(value, dict):
                out[key] = json.dumps(value)
            else:
                out[key] = str(value)
        return out

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> LocalConfig:
        """The configuration from ``PUNCTUAL_LOCAL_*`` variables, then ``overrides`` (not None)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for item in fields(cls):
            key = _ENV_PREFIX + item.name.upper()
            if key not in env:
                continue
            raw = env[key]
            default = getattr(cls(), item.name)
            try:
                values[item.name] = _parsed(raw, default)
            except (ValueError, TypeError):
                raise LocalModeError(f"{key}={raw!r}: not {_KINDS.get(type(default), 'valid')}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def check(self) -> None:
        """Refuse, naming the option, a value every component would fail on (a port out of range,
        a negative count, a template that is not there)."""
        for name, (least, most, option) in _BOUNDS.items():
            value = getattr(self, name)
            if value < least or (most is not None and value > most):
                bounds = f"{least} to {most}" if most is not None else f"at least {least}"
                variable = _ENV_PREFIX + name.upper()
                named = f"{option} ({variable})" if option else variable
                raise LocalModeError(f"{named} must be {bounds}, not {value}")
        if self.template and not Path(self.template).is_file():
            raise LocalModeError(f"--template {self.template}: no such file")

    def with_free_ports(self) -> LocalConfig:
        """This configuration with every port 0 replaced by a free loopback port."""
        return replace(
            self,
            aws_port=self.aws_port or free_port(),
            api_port=self.api_port or free_port(),
            receiver_port=self.receiver_port or free_port(),
        )

    def aws_env(self) -> dict[str, str]:
        """What boto3 needs to reach moto server and nothing else (fake credentials)."""
        return {
            "AWS_ENDPOINT_URL": self.aws_endpoint,
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_SESSION_TOKEN": "local",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
            # Never read the developer's profiles: local mode must not reach a real account.
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }

    def secret_key(self) -> str:
        """The local signing-secret key (``PUNCTUAL_SECRET_KEY``), made once per state directory."""
        return self._state_key("secret.key")

    def token_key(self) -> str:
        """The paging-token key (``PUNCTUAL_TOKEN_KEY``), random, made once per state directory."""
        return self._state_key("token.key")

    def dispatch_key(self) -> str:
        """The key dispatch messages are signed with (``PUNCTUAL_DISPATCH_KEY``), made once per
        state directory (the stack generates one in Secrets Manager instead)."""
        return self._state_key("dispatch.key")

    def _state_key(self, name: str) -> str:
        """The key in ``name`` under the state directory, made by the first process that asks.

        Local mode's processes start side by side and each asks at start, so the key is written
        to a file of the asker's own and published by a hard link, which fails when another
        process published first: a reader never sees a key half written. (Opening the key's own
        path exclusively and writing it after let a process that lost the race read it empty, and
        run with no signing-secret key: every webhook and alert it sent went unsigned.)"""
        path = self.run_dir / name
        if not path.exists():
            self.run_dir.mkdir(parents=True, exist_ok=True)
            draft = self.run_dir / f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
            fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(32))
            try:
                os.link(draft, path)
            except FileExistsError:  # another process published first: its key is the key
                pass
            except OSError:  # a file system without hard links: made in place, read once whole
                _make_in_place(path, draft.read_text())
            finally:
                draft.unlink()
        return _published_key(path)

    def describe(self) -> dict[str, Any]:
        data = asdict(self)
        return {k: str(v) if isinstance(v, Path) else v for k, v in data.items()}


# Each option's least and greatest value (None: no greatest), and its flag ("": a variable only).
_BOUNDS: dict[str, tuple[int, int | None, str]] = {
    "aws_port": (0, 65535, "--aws-port"),
    "api_port": (0, 65535, "--api-port"),
    "receiver_port": (0, 65535, "--receiver-port"),
    "workers": (0, None, "--workers"),
    "ecs_workers": (0, None, "--ecs-workers"),
    "api_processes": (1, None, "--api-processes"),
    "event_source_workers_max": (0, None, "--event-source-workers"),
    "burst_workers_max": (0, None, ""),
    "burst_worker_messages_per_s": (1, None, ""),
    "pollers": (1, None, ""),
    "audit_interval_s": (1, None, ""),
    "audit_grace_s": (0, None, ""),
}
_KINDS = {bool: "a flag", int: "a whole number", float: "a number", dict: "a JSON object", str: "text"}


def _parsed(raw: str, default: Any) -> Any:
    """``raw`` as a value of ``default``'s type (a ``PUNCTUAL_LOCAL_*`` variable)."""
    if isinstance(default, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    if isinstance(default, Path):
        return Path(raw)
    if isinstance(default, dict):
        return dict(json.loads(raw))
    return raw


STATE_KEY_WAIT_S = 5.0  # how long a key file left empty (by an older version's writer) is waited on


def _make_in_place(path: Path, key: str) -> None:
    """Write ``key`` to ``path`` unless another process made it first (a file system without hard
    links: :func:`_published_key` waits for a file made and not yet written)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as handle:
        handle.write(key)


def _published_key(path: Path) -> str:
    """The key in ``path``; an empty file (a writer of an older version, which opened the path
    before writing it, may still be writing) is read again for a few seconds, then refused."""
    deadline = time.monotonic() + STATE_KEY_WAIT_S
    while True:
        key = path.read_text().strip()
        if key:
            return key
        if time.monotonic() >= deadline:
            raise LocalModeError(f"{path} is empty: delete it and start local mode again")
        time.sleep(0.05)


class LoopbackServer(ThreadingHTTPServer):
    """The HTTP server of local mode's stand-ins for the world (the API Gateway, the webhook
    receiver): a thread per request, none of which holds up the exit.

    It listens with werkzeug's backlog (moto's server), 128, not http.server's 5: a burst of
    connections (a minute's top of webhook calls, clients at once) that met the server while it
    did not run for a moment, on a machine whose two cores every process shares, overflowed 5:
    some were reset and the others waited for the kernel's SYN retransmits (1 s, 3 s, 7 s), which
    the receiver counted as fire delay (QA24).
    """

    request_queue_size = 128
    daemon_threads = True


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan stays a zombie where nothing reaps
    orphans, as in some containers). Without /proc (macOS) an existing process counts as alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def started_after(pid: int, instant: float) -> bool:
    """Whether process ``pid`` started after ``instant`` (epoch seconds): it is not the process that
    wrote a pid file then, only one that got its number since (after a reboot, or a container's
    restart, pids start over). False where it cannot be told (no /proc)."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, IndexError, ValueError, StopIteration):
        return False
    return boot + ticks / os.sysconf("SC_CLK_TCK") > instant + 1.0  # (btime is whole seconds)


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return True
        return False


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """True when ``url`` answers (any HTTP status below 500)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return int(reply.status) < 500
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except (OSError, ValueError):
        return False


def apply_env(values: Mapping[str, str]) -> None:
    """Put ``values`` into this process's environment (before boto3 or punctual read it)."""
    os.environ.update(values)


def wait_for(condition: Any, timeout_s: float, interval_s: float = 0.2, what: str = "condition") -> Any:
    """Call ``condition()`` until it returns something truthy; raise after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise LocalModeError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)
