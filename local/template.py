"""The synthesised CDK template, and what local mode takes from it.

Local mode must not drift from the cloud, so it reads the table, the queues and the
functions' settings from the template that ``infra/app.py`` synthesises, never from a
second copy of them. Synthesising takes ~10 s, so the template is cached under
``<cache>/template-<hash>.json``, keyed by a hash of ``infra/`` and ``cdk.json``: ``make run``
synthesises only after the infrastructure code changed.

The synth here uses an empty stand-in for the Lambda layer (``layerAssetDir``): the layer's
contents do not change a single table or queue setting, and building the real one needs
the package registry. If ``infra/`` does not synthesise (someone is half-way through an
edit), the last template in ``cdk.out/`` is used, with a warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local.config import REPO_ROOT, LocalModeError

log = logging.getLogger("local.template")

SYNTH_TIMEOUT_S = 300
AUDITOR_DESCRIPTION = "Punctual chain auditor"  # how the auditor's function is found in the template
_SYNTH_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from infra.app import build_app
app, _ = build_app({{"layerAssetDir": {layer!r}}}, outdir={outdir!r})
app.synth()
"""


# --------------------------------------------------------------------------- finding it


def infra_hash(root: Path = REPO_ROOT) -> str:
    """A hash of everything that shapes the template: ``infra/`` (sources) and ``cdk.json``."""
    digest = hashlib.sha256()
    paths = [p for p in sorted((root / "infra").rglob("*")) if p.is_file()]
    paths = [p for p in paths if "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")]
    for path in [*paths, root / "cdk.json"]:
        if path.is_file():
            digest.update(str(path.relative_to(root)).encode())
            digest.update(b"\0")
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()[:16]


def synthesise(cache_dir: Path, root: Path = REPO_ROOT) -> Path:
    """Run the CDK app (no Docker, no network) and return the stack template's path."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    layer = cache_dir / "stub-layer"
    (layer / "python").mkdir(parents=True, exist_ok=True)
    outdir = Path(tempfile.mkdtemp(prefix="synth-", dir=cache_dir))
    env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    env.pop("CDK_CONTEXT_JSON", None)
    script = _SYNTH_SCRIPT.format(root=str(root), layer=str(layer), outdir=str(outdir))
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=SYNTH_TIMEOUT_S,
            check=False,
        )
        templates = sorted(outdir.glob("*.template.json"))
        if done.returncode != 0 or len(templates) != 1:
            tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise LocalModeError(f"synthesising infra/ failed (exit {done.returncode}): {tail[:400]}")
        target = Path(tempfile.mkstemp(prefix="template-", suffix=".json", dir=cache_dir)[1])
        shutil.copyfile(templates[0], target)
        return target
    finally:
        shutil.rmtree(outdir, ignore_errors=True)


def template_path(cache_dir: Path, override: str = "", root: Path = REPO_ROOT) -> Path:
    """The template local mode deploys: ``override``, else the cached synth of this ``infra/``."""
    if override:
        path = Path(override)
        if not path.is_file():
            raise LocalModeError(f"template {override} does not exist")
        return path
    cached = cache_dir / f"template-{infra_hash(root)}.json"
    if cached.is_file():
        return cached
    try:
        made = synthesise(cache_dir, root)
        os.replace(made, cached)  # atomic: two concurrent first runs both end with one good file
        return cached
    except (LocalModeError, subprocess.TimeoutExpired, OSError) as exc:
        fallback = sorted((root / "cdk.out").glob("*.template.json"))
        if not fallback:
            raise LocalModeError(f"{exc}; and there is no cdk.out/*.template.json to fall back on") from None
        log.warning("%s; using %s, which may be stale", exc, fallback[0])
        return fallback[0]


def load_template(cache_dir: Path, override: str = "", root: Path = REPO_ROOT) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(template_path(cache_dir, override, root).read_text())
    return data


# --------------------------------------------------------------------------- reading it


@dataclass(frozen=True)
class TableDef:
    logical_id: str
    key_schema: list[dict[str, str]]
    attribute_definitions: list[dict[str, str]]
    billing_mode: str
    ttl_attribute: str | None
    global_secondary_indexes: list[dict[str, Any]] = field(default_factory=list)
    local_secondary_indexes: list[dict[str, Any]] = field(default_factory=list)
    stream_view_type: str | None = None


@dataclass(frozen=True)
class QueueDef:
    """One SQS queue of the template, under the name local mode gives it.

    ``attributes`` are the queue's CloudFormation properties as SQS attribute strings,
    without ``RedrivePolicy`` (it names a queue ARN, which differs locally): ``dead_letter``
    and ``max_receive_count`` carry it.
    """

    logical_id: str
    role: str  # "short", "long", "failed" or "dlq"
    name: str
    attributes: dict[str, str]
    dead_letter: str | None = None  # logical id of this queue's dead-letter queue
    max_receive_count: int | None = None


@dataclass(frozen=True)
class FunctionDef:
    logical_id: str
    timeout_s: int
    memory_mb: int
    environment: dict[str, str]  # literal values only (references are resolved locally)


@dataclass(frozen=True)
class Blueprint:
    """What local mode deploys, read from the template."""

    table: TableDef
    queues: list[QueueDef]
    poller: FunctionDef
    worker: FunctionDef
    api: FunctionDef
    worker_batch_size: int
    ecs_environment: dict[str, str]
    ecs_stop_timeout_s: int
    # The minute state machine's poller task: its Retry field, as the template has it (the
    # retriers local mode follows when a poller fails, local/retriers.py).
    poller_retry: list[dict[str, Any]] = field(default_factory=list)
    auditor: FunctionDef | None = None  # the chain auditor's function (none in an older template)

    def queues_of(self, role: str) -> list[QueueDef]:
        return [q for q in self.queues if q.role == role]

    def queue(self, logical_id: str) -> QueueDef:
        return next(q for q in self.queues if q.logical_id == logical_id)


# CloudFormation AWS::SQS::Queue properties that are SQS attributes of the same name.
_QUEUE_ATTRIBUTES = (
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "DelaySeconds",
    "FifoQueue",
    "FifoThroughputLimit",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "SqsManagedSseEnabled",
    "VisibilityTimeout",
)


def _resources(template: Mapping[str, Any], kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for logical_id, resource in template.get("Resources", {}).items():
        if resource.get("Type") == kind:
            yield logical_id, resource.get("Properties", {})


def _refs(value: Any) -> list[str]:
    """Logical ids referenced (Ref / Fn::GetAtt) anywhere inside ``value``."""
    found: list[str] = []
    if isinstance(value, dict):
        if "Ref" in value and isinstance(value["Ref"], str):
            found.append(value["Ref"])
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            found.append(target[0] if isinstance(target, list) else str(target).split(".")[0])
        for item in value.values():
            found.extend(_refs(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(_refs(item))
    return list(dict.fromkeys(found))


def _literal_env(variables: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in variables.items() if isinstance(v, str | int | float | bool)}


def _sqs_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _function_env(props: Mapping[str, Any]) -> dict[str, Any]:
    return dict((props.get("Environment") or {}).get("Variables") or {})


def _join(value: Any) -> str:
    """The text of an ``Fn::Join``; references become ``<LogicalId>`` (JSON-safe placeholders)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(_join(part) for part in parts)
    refs = _refs(value)
    return f"<{refs[0] if refs else '?'}>"


def _tasks(states: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every Task state of a States map, inside Map and Parallel states too."""
    for state in states.values():
        if state.get("Type") == "Task":
            yield state
        processor = state.get("ItemProcessor") or state.get("Iterator") or {}
        yield from _tasks(processor.get("States", {}))
        for branch in state.get("Branches", []):
            yield from _tasks(branch.get("States", {}))


def poller_retry(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``Retry`` of the minute state machine's Lambda task (the poller's); [] if none.

    With more than 40 groups the machine has one such task per Map of its Parallel state,
    all alike: the first is taken.
    """
    for _, props in _resources(template, "AWS::StepFunctions::StateMachine"):
        raw = props.get("DefinitionString") or props.get("Definition")
        if raw is None:
            continue
        definition = raw if isinstance(raw, dict) and "States" in raw else json.loads(_join(raw))
        for task in _tasks(definition.get("States", {})):
            if str(task.get("Resource", "")).endswith(":states:::lambda:invoke"):
                return [dict(retrier) for retrier in task.get("Retry", [])]
    return []


def read_blueprint(template: Mapping[str, Any], prefix: str = "punctual") -> Blueprint:
    """Find the table, queues and functions of the Punctual stack in ``template``.

    Roles are found from references, not from generated logical ids: the table is what
    ``PUNCTUAL_TABLE_NAME`` names, the short/long/failed queues what the ``*_QUEUE_URL(S)``
    variables name (in order), dead-letter queues what their redrive policies name, the
    poller the function the state machine invokes, the worker Lambda the function of the
    short queue's event source mapping, the API function the one API Gateway integrates.
    """
    functions = dict(_resources(template, "AWS::Lambda::Function"))
    any_env: dict[str, Any] = {}
    for props in functions.values():
        env = _function_env(props)
        if "PUNCTUAL_TABLE_NAME" in env:
            any_env = env
            break
    if not any_env:
        raise LocalModeError("no function in the template has PUNCTUAL_TABLE_NAME: not a Punctual stack")

    tables = dict(_resources(template, "AWS::DynamoDB::Table"))
    table_id = _refs(any_env["PUNCTUAL_TABLE_NAME"])[0]
    tprops = tables[table_id]
    ttl = tprops.get("TimeToLiveSpecification") or {}
    table = TableDef(
        logical_id=table_id,
        key_schema=list(tprops["KeySchema"]),
        attribute_definitions=list(tprops["AttributeDefinitions"]),
        billing_mode=str(tprops.get("BillingMode", "PROVISIONED")),
        ttl_attribute=ttl.get("AttributeName") if ttl.get("Enabled") else None,
        global_secondary_indexes=list(tprops.get("GlobalSecondaryIndexes") or []),
        local_secondary_indexes=list(tprops.get("LocalSecondaryIndexes") or []),
        stream_view_type=(tprops.get("StreamSpecification") or {}).get("StreamViewType"),
    )

    queue_props = dict(_resources(template, "AWS::SQS::Queue"))
    roles: dict[str, tuple[str, str]] = {}  # logical id -> (role, name)
    for role, variable in (
        ("short", "PUNCTUAL_SHORT_QUEUE_URLS"),
        ("long", "PUNCTUAL_LONG_QUEUE_URLS"),
        ("failed", "PUNCTUAL_FAILED_QUEUE_URL"),
    ):
        for index, logical_id in enumerate(_refs(any_env.get(variable, ""))):
            fifo = bool(queue_props[logical_id].get("FifoQueue"))
            base = f"{prefix}-{role}" if role == "failed" else f"{prefix}-{role}-{index}"
            roles[logical_id] = (role, base + (".fifo" if fifo else ""))
    queues: list[QueueDef] = []
    dead_letters: dict[str, str] = {}
    for logical_id, props in queue_props.items():
        redrive = props.get("RedrivePolicy") or {}
        if redrive:
            dlq = _refs(redrive.get("deadLetterTargetArn"))[0]
            dead_letters[dlq] = logical_id
    for logical_id, props in queue_props.items():
        if logical_id in roles:
            role, name = roles[logical_id]
        elif logical_id in dead_letters:
            owner = roles.get(dead_letters[logical_id])
            if owner is None:
                continue
            role = "dlq"
            stem = owner[1].removesuffix(".fifo")
            name = f"{stem}-dlq" + (".fifo" if props.get("FifoQueue") else "")
        else:
            continue  # a queue that is not Punctual's own (none today)
        redrive = props.get("RedrivePolicy") or {}
        queues.append(
            QueueDef(
                logical_id=logical_id,
                role=role,
                name=name,
                attributes={k: _sqs_value(props[k]) for k in _QUEUE_ATTRIBUTES if k in props},
                dead_letter=_refs(redrive.get("deadLetterTargetArn"))[0] if redrive else None,
                max_receive_count=int(redrive["maxReceiveCount"]) if redrive else None,
            )
        )

    def function(logical_id: str) -> FunctionDef:
        props = functions[logical_id]
        return FunctionDef(
            logical_id=logical_id,
            timeout_s=int(props.get("Timeout", 3)),
            memory_mb=int(props.get("MemorySize", 128)),
            environment=_literal_env(_function_env(props)),
        )

    machines = dict(_resources(template, "AWS::StepFunctions::StateMachine"))
    poller_ids = [r for m in machines.values() for r in _refs(m.get("DefinitionString")) if r in functions]
    if not poller_ids:  # the tick names the poller in each execution's input (standard, or lean)
        poller_ids = [
            r
            for props in functions.values()
            for r in _refs(_function_env(props).get("PUNCTUAL_POLLER_FUNCTION"))
            if r in functions
        ]
    if not poller_ids:
        raise LocalModeError("neither the state machine nor the tick names a poller function")
    short_ids = [q.logical_id for q in queues if q.role == "short"]
    worker_id, batch_size = None, 10
    for _, props in _resources(template, "AWS::Lambda::EventSourceMapping"):
        if set(_refs(props.get("EventSourceArn"))) & set(short_ids):
            worker_id = _refs(props.get("FunctionName"))[0]
            batch_size = int(props.get("BatchSize", 10))
            break
    if worker_id is None:
        raise LocalModeError("no event source mapping reads the short queue: cannot find the worker")
    api_ids = [
        r
        for _, props in _resources(template, "AWS::ApiGateway::Method")
        for r in _refs(props)
        if r in functions
    ]
    if not api_ids:
        raise LocalModeError("no API Gateway method integrates a function: cannot find the API")

    ecs_env: dict[str, str] = {}
    stop_timeout = 30
    for _, props in _resources(template, "AWS::ECS::TaskDefinition"):
        for container in props.get("ContainerDefinitions", []):
            env = {e["Name"]: e["Value"] for e in container.get("Environment", [])}
            if "PUNCTUAL_TABLE_NAME" in env:
                ecs_env = _literal_env(env)
                stop_timeout = int(container.get("StopTimeout", stop_timeout))
    auditor_ids = [
        logical_id
        for logical_id, props in functions.items()
        if str(props.get("Description", "")).startswith(AUDITOR_DESCRIPTION)
    ]
    return Blueprint(
        auditor=function(auditor_ids[0]) if auditor_ids else None,
        table=table,
        queues=queues,
        poller=function(poller_ids[0]),
        worker=function(worker_id),
        api=function(api_ids[0]),
        worker_batch_size=batch_size,
        ecs_environment=ecs_env,
        ecs_stop_timeout_s=stop_timeout,
        poller_retry=poller_retry(template),
    )
