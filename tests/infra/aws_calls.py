"""Which AWS actions each component's code makes, read from the source (AST), per method.

The runtime reaches AWS through a few adapter classes (the DynamoDB store, the SQS queues,
the secret box, ...) and a few direct client calls. For every method of those classes this
finds the IAM actions it needs: its boto3 calls (``client.update_item(`` is
``dynamodb:UpdateItem``), transactions by the item kinds they build (``{"Delete": ...}`` is
``dynamodb:DeleteItem``), batch calls by what they authorise as, and the same for the
``self._helper`` methods it calls. A component's actions are then those of every adapter
method its modules call by name, plus their direct client calls.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from collections.abc import Iterable
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "layers" / "core" / "python" / "punctual"
FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"

# The adapter classes: module, class, the AWS service of its client, and how the code names
# an instance where it calls a method (a call counts only on such a receiver).
ADAPTERS: tuple[tuple[str, str, str, str], ...] = (
    ("store/dynamo/*.py", "Dynamo*", "dynamodb", r"store"),  # one mixin per aggregate
    ("dispatch/queues.py", "SqsQueues", "sqs", r"queues"),
    ("security/signing_secrets.py", "SecretCipher", "kms", r"cipher|box|secrets"),
    ("security/tenant_keys.py", "TenantKeyring", "kms", r"keyring"),
    ("execution/ports.py", "SqsFailureSink", "sqs", r"failures"),
    ("delivery/notifications/events.py", "EventBridgeSink", "events", r"sink"),
)
# An adapter that holds another: its methods' calls ``self.<attribute>.<method>(`` need what
# that adapter's method needs (the secret box seals under the tenant keyring's data keys).
DELEGATES: dict[str, dict[str, str]] = {"SecretCipher": {"keyring": "TenantKeyring"}}
# Functions and classes (called by name) that make AWS calls: module, name, service, and the
# name the components call it by when that is another function of the module (a wrapper).
AWS_FUNCTIONS: tuple[tuple[str, str, str, str], ...] = (
    ("security/ownership.py", "own_resources", "ssm", "own_resources"),
    ("api/wiring.py", "token_key", "secretsmanager", "token_key"),
    (
        "delivery/targets/aws_clients.py",
        "Boto3ClientFactory",
        "sts",
        "Boto3ClientFactory",
    ),  # execution and target roles
    ("security/message_auth.py", "_read_secret", "secretsmanager", "signer_from"),  # the dispatch key
)
# Module functions an adapter's methods call by name with its client: their client calls are the
# method's (SqsQueues.send sends each request of ten through sqs_send.send_batch).
ADAPTER_HELPERS: dict[str, str] = {"send_batch": "dispatch/sqs_send.py"}
# Permissions a call needs besides its own action: AssumeRole with session tags.
IMPLIED = {"sts:AssumeRole": {"sts:TagSession"}}
# Calls made inside libraries, by component: Powertools' idempotency records (the API's
# Idempotency-Key) live in the table.
LIBRARY_ACTIONS: dict[str, dict[str, str]] = {
    "api": {
        "dynamodb:GetItem": "powertools idempotency",
        "dynamodb:PutItem": "powertools idempotency",
        "dynamodb:UpdateItem": "powertools idempotency",
        "dynamodb:DeleteItem": "powertools idempotency",
    },
}
# Adapter helpers a component's configuration never reaches: the tick's store is built
# without a timer layout (Container.reader), so check_layout returns before writing.
# The poller's job replaces (a paused job's owed slot parked, a one-time job completed) never
# name a parent to unlink, so the transaction's link Delete is never in them (the poller never
# deletes: no DeleteItem).
UNREACHED: dict[str, frozenset[str]] = {
    "tick": frozenset({"check_layout"}),
    "poller": frozenset({"_remove_link"}),
}
# Actions a component's code calls only in some deployment shapes: the tick scales the burst ECS
# service only when the stack has one (ecsBurstTasks or ecsBurstTasksMax), and is granted them then.
BURST_SERVICE_ACTIONS: dict[str, frozenset[str]] = {
    "tick": frozenset({"ecs:DescribeServices", "ecs:UpdateService"}),
}
# What AWS asks of the caller beside the call: RegisterScalableTarget on an ECS service needs
# ecs:DescribeServices and ecs:UpdateService on it (the ECS developer guide, "IAM permissions required
# for Amazon ECS service auto scaling"). The tick registers the ECS worker service's minimum
# (punctual.dispatch.ecs_lane) when the stack keeps tasks ready for the ECS lane.
ECS_LANE_CALLER_ACTIONS: dict[str, frozenset[str]] = {
    "tick": frozenset({"ecs:DescribeServices", "ecs:UpdateService"}),
}
# (The tick and group 0's pollers look for a minute on every minute state machine before they
# start it: DescribeExecution in every deployment shape.)
# (The tick also looks at a minute's execution to re-plan it, punctual.dispatch.burst_sight.)
BURST_MACHINE_ACTIONS: dict[str, frozenset[str]] = {}
# boto3 operations authorised as another action.
AUTHORISED_AS = {
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}
# The store's writer of a transaction's items one at a time, on a table without transactions.
SEQUENCED_WRITER = "store/dynamo/sequenced.py"
TRANSACTION_ITEMS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}
# What each component runs: its handler and the core modules of its work (not the target
# adapters: targets are called with the deployment's target role, never the component's own).
# ``module.py:name,name`` counts only those top-level functions of the module (and the module's
# functions they call by name): what a component imports from a module shared with others.
COMPONENT_MODULES: dict[str, tuple[str, ...]] = {
    "api": (
        "functions/api/handler.py",
        "api/*.py",
        "usecases/jobs.py",
        "usecases/calendar_service.py",
        # what jobs.py hands to it: a replace's owed children, a run-now's send after its check
        "usecases/child_slots.py:send_owed_children,send_run_now",
    ),
    # The poller publishes events; alerts are raised by workers (notifications/alerts.py).
    "poller": (
        "functions/poller/handler.py",
        "runtime/composition.py",
        "dispatch/tick.py",  # group 0's pollers start the next minute when no tick did (relay_next)
        "dispatch/burst_sight.py",  # ... and re-plan it as the tick would, when a burst seen since needs it
        "dispatch/polling/*.py",
        "dispatch/budget_reservations.py",  # rate budgets' reservations (conditional writes, a query)
        "delivery/notifications/__init__.py",
        "delivery/notifications/events.py",
    ),
    "worker": (
        "functions/worker/handler.py",
        "runtime/composition.py",  # builds the worker: its queues sign, so it reads the dispatch key
        "execution/*.py",
        "dispatch/budget_reservations.py",  # a late smoothed call reserves a new instant of its budget
        "delivery/notifications/*.py",
        "execution/worker_service.py",
        "delivery/targets/__init__.py",
    ),
    # its store: Container.reader; its scaling: the capacity actuator of punctual.dispatch.scaling_aws
    # and its Burst Shortfall events and re-plans (burst_sight.py)
    "tick": (
        "functions/tick/handler.py",
        "dispatch/tick.py",
        "dispatch/scaling.py",
        "dispatch/scaling_aws.py",
        "dispatch/burst_sight.py",
        "dispatch/ecs_lane.py",
        "delivery/notifications/events.py",
    ),
    # The chain auditor: its reads and repairs (punctual.auditing), the events it publishes, and the
    # composition root (its queues sign a lost range's alert message: the dispatch key).
    "auditor": (
        "functions/auditor/handler.py",
        "runtime/composition.py",
        "auditing/*.py",
        "delivery/notifications/__init__.py",
        "delivery/notifications/events.py",
    ),
    # The dashboard's console widget: a page of jobs and each one's history (reads only). Of
    # next_fire it calls two functions; the module's NextFire (the API's, which batch-reads
    # calendars) is not the console's.
    "console": (
        "functions/console/handler.py",
        "console/*.py",
        "usecases/next_fire.py:owes_now,next_release",
    ),
}


def _pascal(snake: str) -> str:
    return "".join(part.capitalize() for part in snake.split("_"))


def _client_ops(node: ast.AST) -> set[str]:
    """``<something client-like>.<snake_op>(`` calls: ``client.x(``, ``self.client.x(``, ``self._kms_client().x(``."""
    found: set[str] = set()
    for call in ast.walk(node):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
            continue
        receiver = ast.unparse(call.func.value)
        if re.search(r"(^|\.|_)(client|sqs|kms|ssm|sts|sfn|SFN|secrets_manager)(\(\))?$", receiver):
            found.add(call.func.attr)
    return found


def _helper_ops(node: ast.AST) -> set[str]:
    """The client calls of the :data:`ADAPTER_HELPERS` that ``node`` calls by name."""
    called = {
        call.func.id
        for call in ast.walk(node)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ADAPTER_HELPERS
    }
    ops: set[str] = set()
    for name in called:
        helper = next(
            n for n in _parse(ADAPTER_HELPERS[name]).body if isinstance(n, ast.FunctionDef) and n.name == name
        )
        ops |= _client_ops(helper)
    return ops


def _self_calls(node: ast.AST) -> set[str]:
    return {
        call.func.attr
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id in ("self", "cls")
    }


def _attribute_calls(node: ast.AST) -> set[tuple[str, str]]:
    """``self.<attribute>.<method>(`` calls, as (attribute, method)."""
    return {
        (call.func.value.attr, call.func.attr)
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Attribute)
        and isinstance(call.func.value.value, ast.Name)
        and call.func.value.value.id == "self"
    }


def _transaction_kinds(node: ast.AST) -> set[str]:
    return {
        key.value
        for d in ast.walk(node)
        if isinstance(d, ast.Dict)
        for key in d.keys
        if isinstance(key, ast.Constant) and key.value in TRANSACTION_ITEMS
    }


def _actions(service: str, ops: Iterable[str], kinds: Iterable[str], transactions: bool = True) -> set[str]:
    actions: set[str] = set()
    for op in ops:
        if op == "transact_write_items":
            # Without transactions (an MRSC table) the store writes the items one by one and
            # undoes them on a failed condition: the calls the sequenced writer makes.
            actions |= {TRANSACTION_ITEMS[k] for k in kinds} if transactions else sequenced_actions()
            continue
        action = f"{service}:{_pascal(op)}"
        actions.add(AUTHORISED_AS.get(action, action))
    return actions


def _parse(relative: str) -> ast.Module:
    return ast.parse((CORE / relative).read_text())


def sequenced_actions() -> set[str]:
    """What a transaction written one item at a time may call: every client call of the
    sequenced writer's module (its writes, the ConditionCheck's update, the undo)."""
    return _actions("dynamodb", _client_ops(_parse(SEQUENCED_WRITER)), ())


def adapter_methods(
    unreached: frozenset[str] = frozenset(), transactions: bool = True
) -> dict[str, tuple[str, set[str]]]:
    """Public adapter method name → (receiver pattern, the IAM actions it and its helpers need);
    ``transactions=False``: as the store calls on a table without transactions."""
    result: dict[str, tuple[str, set[str]]] = {}
    by_class: dict[str, dict[str, set[str]]] = {}  # adapter class -> method -> actions (delegates)
    delegated: list[tuple[str, str, set[tuple[str, str]]]] = []  # (receiver, method, {(class, callee)})
    for module, class_name, service, receiver in ADAPTERS:
        # A module glob and a class-name pattern: an adapter's methods may sit in several mixins
        # (self-calls then resolve across them, as the composed class does).
        classes = [
            node
            for path in sorted(CORE.glob(module))
            for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.ClassDef) and fnmatch.fnmatchcase(node.name, class_name)
        ]
        assert classes, (module, class_name)
        methods = {f.name: f for cls in classes for f in cls.body if isinstance(f, ast.FunctionDef)}

        def closure(name: str, seen: set[str], methods: dict[str, ast.FunctionDef] = methods) -> set[str]:
            seen.add(name)
            names = {name}
            for callee in _self_calls(methods[name]) & set(methods):
                if callee not in seen and callee not in unreached:
                    names |= closure(callee, seen)
            return names

        for name in methods:
            if name.startswith("_") or name in ("__init__",):
                continue
            body = [methods[n] for n in closure(name, set())]
            ops = set().union(*(_client_ops(b) | _helper_ops(b) for b in body))
            kinds = set().union(*(_transaction_kinds(b) for b in body))
            actions = _actions(service, ops, kinds, transactions)
            by_class.setdefault(class_name, {}).setdefault(name, set()).update(actions)
            for owner in (c.name for c in classes):
                calls = {
                    (DELEGATES[owner][attribute], callee)
                    for b in body
                    for attribute, callee in _attribute_calls(b)
                    if attribute in DELEGATES.get(owner, {})
                }
                if calls:
                    delegated.append((receiver, name, calls))
            if actions:
                result.setdefault(name, (receiver, set()))[1].update(actions)
    for receiver, name, calls in delegated:
        for target_class, callee in calls:
            needed = by_class.get(target_class, {}).get(callee, set())
            if needed:
                result.setdefault(name, (receiver, set()))[1].update(needed)
    for module, function, service, called_as in AWS_FUNCTIONS:
        node = next(
            n
            for n in _parse(module).body
            if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == function
        )
        result.setdefault(called_as, ("", set()))[1].update(_actions(service, _client_ops(node), ()))
    return result


def _component_files(component: str) -> list[tuple[Path, frozenset[str]]]:
    """Each module of the component, with the names it runs of it (empty: all of it)."""
    files: list[tuple[Path, frozenset[str]]] = []
    for entry in COMPONENT_MODULES[component]:
        pattern, _, names = entry.partition(":")
        used = frozenset(names.split(",")) if names else frozenset()
        if pattern.startswith("functions/"):
            files.append((FUNCTIONS.parent / pattern, used))
        else:
            paths = sorted(CORE.glob(pattern))
            assert paths, entry
            files.extend((path, used) for path in paths)
    return files


def _used_part(tree: ast.Module, names: frozenset[str], path: Path) -> ast.Module:
    """The top-level functions ``names`` of ``tree`` and those of the module they call by name."""
    defined = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert names <= set(defined), (path, sorted(names - set(defined)))
    wanted: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in wanted:
            continue
        wanted.add(name)
        pending.extend(
            call.func.id
            for call in ast.walk(defined[name])
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in defined
        )
    return ast.Module(body=[defined[name] for name in sorted(wanted)], type_ignores=[])


def component_actions(component: str, transactions: bool = True) -> dict[str, set[str]]:
    """IAM action → where the component's code needs it (``module:method``); ``transactions=False``:
    on a table without transactions (the multi-Region profile's). A fresh copy each call (the
    code is read once per process: each reading parses every module the component imports)."""
    key = (component, transactions)
    if key not in _ACTIONS_READ:
        _ACTIONS_READ[key] = _read_component_actions(component, transactions)
    return {action: set(where) for action, where in _ACTIONS_READ[key].items()}


_ACTIONS_READ: dict[tuple[str, bool], dict[str, set[str]]] = {}


def _read_component_actions(component: str, transactions: bool) -> dict[str, set[str]]:
    methods = adapter_methods(UNREACHED.get(component, frozenset()), transactions)
    needs: dict[str, set[str]] = {a: {w} for a, w in LIBRARY_ACTIONS.get(component, {}).items()}
    for path, used in _component_files(component):
        tree = ast.parse(path.read_text())
        if used:
            tree = _used_part(tree, used, path)
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            if isinstance(call.func, ast.Attribute):
                name, on = call.func.attr, ast.unparse(call.func.value)
            elif isinstance(call.func, ast.Name):
                name, on = call.func.id, ""
            else:
                continue
            receiver, actions = methods.get(name, ("", set()))
            if receiver and not re.search(receiver, on):
                continue  # another object's method of the same name (a route's app.delete)
            for action in actions | set().union(*(IMPLIED.get(a, set()) for a in actions)):
                needs.setdefault(action, set()).add(f"{path.name}:{name}")
        # Direct client calls in the component's own modules (the tick starts executions).
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(node.name == a[1] for a in ADAPTERS + AWS_FUNCTIONS):
                continue  # an adapter's methods count where they are called, not where defined
            for op in _client_ops(node):
                service = _service_of(path, op)
                if service:
                    needs.setdefault(_actions(service, [op], ()).pop(), set()).add(f"{path.name}:{op}")
    return needs


def _service_of(path: Path, op: str) -> str | None:
    """The service of a direct client call in a component module (few, listed here)."""
    direct = {
        "start_execution": "states",
        "send_message": "sqs",
        "get_queue_attributes": "sqs",  # the tick: the short queues' backlog
        "get_event_source_mapping": "lambda",  # the tick: the worker event sources' concurrency
        "update_event_source_mapping": "lambda",
        "describe_services": "ecs",  # the tick: the burst service's desired count
        "update_service": "ecs",
        "describe_execution": "states",  # the tick: a minute on the other state machine
        "stop_execution": "states",  # the tick: a waiting minute re-planned
        "describe_scalable_targets": "application-autoscaling",  # the tick: the ECS lane's minimum
        "register_scalable_target": "application-autoscaling",
    }
    return direct.get(op)
