"""One settings schema (issue 18, point 2): ``punctual.runtime.settings.Settings`` defines every variable;
the stack derives the deployed ones from the CDK context; cdk.json, the app's defaults and the
runtime's defaults agree; every variable the stack sets is one the runtime reads."""

from __future__ import annotations

import json
from pathlib import Path

from cdk_helpers import Synth

from punctual.console.widget import ConsoleSettings
from punctual.execution.worker_service import ServiceSettings
from punctual.runtime.settings import DEPLOYED, Settings, context_key, env_value
from punctual_cdk.config import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = json.loads((ROOT / "cdk.json").read_text())["context"]


def test_every_deployed_setting_has_one_default_everywhere() -> None:
    for field in DEPLOYED:
        key = context_key(field)
        default = Settings.model_fields[field].get_default(call_default_factory=True)
        assert key in CONTEXT and key in DEFAULTS, key
        # cdk.json lists [] where the app has (): the same value as a variable
        assert env_value(CONTEXT[key]) == env_value(DEFAULTS[key]) == env_value(default), (field, key)


def test_cdk_json_and_the_apps_defaults_name_the_same_keys() -> None:
    app_keys = {key for key in CONTEXT if not key.startswith("@")}  # "@aws-cdk/...": CDK's own flags
    assert app_keys == set(DEFAULTS)


def _variables_read() -> set[str]:
    read = {Settings.variable(name) for name in Settings.model_fields}
    read |= {"PUNCTUAL_WORKER_" + name.upper() for name in ServiceSettings.model_fields}
    read |= {"PUNCTUAL_CONSOLE_" + name.upper() for name in ConsoleSettings.model_fields}
    return read


def test_every_variable_the_stack_sets_is_one_the_runtime_reads(any_synth: Synth) -> None:
    read = _variables_read()
    environments: list[dict[str, object]] = []
    for function in any_synth.of_type("AWS::Lambda::Function").values():
        environments.append(function["Properties"].get("Environment", {}).get("Variables", {}))
    for task in any_synth.of_type("AWS::ECS::TaskDefinition").values():
        for container in task["Properties"]["ContainerDefinitions"]:
            environments.append({e["Name"]: e["Value"] for e in container.get("Environment", [])})
    set_somewhere = {name for env in environments for name in env if name.startswith("PUNCTUAL_")}
    assert set_somewhere, "no PUNCTUAL_ variable found"
    assert set_somewhere - read == set()


def test_the_deployed_settings_reach_the_functions_from_the_context(default_synth: Synth) -> None:
    config = default_synth.stack.config
    (api,) = [
        f
        for f in default_synth.of_type("AWS::Lambda::Function").values()
        if "PUNCTUAL_TOKEN_KEY_SECRET" in f["Properties"].get("Environment", {}).get("Variables", {})
    ]
    variables = api["Properties"]["Environment"]["Variables"]
    for field in DEPLOYED:
        assert variables[Settings.variable(field)] == env_value(getattr(config, field)), field
    # and they read back as the runtime's settings, whatever their type
    values = {k: v for k, v in variables.items() if isinstance(v, str)}
    settings = Settings.from_env(values)
    for field in DEPLOYED:
        assert env_value(getattr(settings, field)) == env_value(getattr(config, field)), field
