"""The project's structure check (.ci/structure_check.py, run by `make lint`) on small trees.

Each test builds a tree under tmp_path laid out like the repository (the core package under
layers/core/python, local/ at the root...) and asserts what the check prints for it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

CHECK = Path(__file__).resolve().parents[2] / ".ci" / "structure_check.py"


def load_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("structure_check", CHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["structure_check"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


check = load_check()
CORE = "layers/core/python/punctual"
CLIENT_HOME = check.CLIENT_HOMES[0].module  # the one factory's module (punctual.runtime.aws)
ENV_HOME = check.ENVIRONMENT_HOMES[0].module  # the settings model's (punctual.runtime.settings)


def home_file(module: str) -> str:
    return "layers/core/python/" + module.replace(".", "/") + ".py"


def packages_of(module: str) -> dict[str, str]:
    """An empty ``__init__.py`` for each package above ``module`` (the home may sit in a sub-package)."""
    parts = module.split(".")[:-1]
    return {"layers/core/python/" + "/".join(parts[: i + 1]) + "/__init__.py": "" for i in range(len(parts))}


def write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def run(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = check.main([str(root)])
    return code, capsys.readouterr().out.splitlines()


def package(*modules: str) -> dict[str, str]:
    """A clean core package holding the named modules (empty), with its homes."""
    files = {
        **packages_of(CLIENT_HOME),
        **packages_of(ENV_HOME),
        home_file(CLIENT_HOME): "",
        home_file(ENV_HOME): "",
    }
    files.update({f"{CORE}/{name}.py": "" for name in modules})
    return files


def test_a_clean_tree_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a tree within every limit: a module of exactly 800 lines, a class of exactly 400
    write(tmp_path, package())
    write(tmp_path, {f"{CORE}/long.py": "x = 1\n" * 800})
    write(tmp_path, {"local/__init__.py": "", "local/shape.py": "class Shape:\n" + "    x = 1\n" * 399})
    write(tmp_path, {home_file(CLIENT_HOME): "import boto3\n\nCLIENT = boto3.client('sqs')\n"})
    write(tmp_path, {home_file(ENV_HOME): "import os\n\nREGION = os.environ.get('AWS_REGION')\n"})
    # When the check runs / Then it passes and says so
    code, out = run(tmp_path, capsys)
    assert code == 0
    assert out == [out[0]] and "no module over 800 lines" in out[0]


def test_a_module_over_800_lines_is_named_with_its_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, package())
    write(tmp_path, {"bench/big.py": "x = 1\n" * 801, "tests/unit/test_big.py": "y = 2\n" * 950})
    code, out = run(tmp_path, capsys)
    assert code == 1
    assert "bench/big.py: module has 801 lines, over the limit of 800 lines per module" in out
    assert "tests/unit/test_big.py: module has 950 lines, over the limit of 800 lines per module" in out
    assert len(out) == 2


def test_a_class_over_400_lines_is_named_with_its_line_and_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a class of 401 lines counting its decorator, in the chaos harness
    body = "@dataclass\nclass Judge:\n" + "    x: int = 1\n" * 399
    write(tmp_path, {"local/__init__.py": "", "local/chaos/__init__.py": "", "local/chaos/verdict.py": body})
    code, out = run(tmp_path, capsys)
    assert code == 1
    assert out == [
        "local/chaos/verdict.py:2: class Judge has 401 lines, over the limit of 400 lines per class"
    ]


def test_a_cycle_closed_by_a_function_level_import_is_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given wheel imports spin at the top, and spin imports wheel inside a function
    write(tmp_path, package())
    write(
        tmp_path,
        {
            f"{CORE}/gears/__init__.py": "",
            f"{CORE}/gears/wheel.py": "from punctual.gears.spin import Spin\n",
            f"{CORE}/gears/spin.py": (
                "class Spin:\n    def run(self) -> None:\n"
                "        from punctual.gears import wheel\n\n        wheel.go()\n"
            ),
        },
    )
    code, out = run(tmp_path, capsys)
    assert code == 1
    assert len(out) == 1
    assert "import cycle of 2 modules, over the limit of none" in out[0]
    assert f"{CORE}/gears/spin.py:3" in out[0] and f"{CORE}/gears/wheel.py:1" in out[0]


def test_type_only_and_relative_imports_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given face imports hands for its annotations only, and hands imports face relatively
    write(tmp_path, package())
    write(
        tmp_path,
        {
            f"{CORE}/clocks/__init__.py": "",
            f"{CORE}/clocks/face.py": (
                "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .hands import HandsOptions\n"
            ),
            f"{CORE}/clocks/hands.py": "from . import face\n",
        },
    )
    code, out = run(tmp_path, capsys)
    assert code == 1
    assert out == [
        f"{CORE}/clocks/face.py: import cycle of 2 modules, over the limit of none: "
        f"{CORE}/clocks/face.py:4 -> {CORE}/clocks/hands.py:1 -> {CORE}/clocks/face.py"
    ]


def test_a_longer_cycle_across_packages_is_found_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        tmp_path,
        {
            "local/__init__.py": "",
            "local/cli.py": "def main() -> None:\n    from local import demo\n",
            "local/demo.py": "import local.supervisor\n",
            "local/supervisor.py": "from local.zygote import fork\n",
            "local/zygote.py": "from local.cli import main\n",
        },
    )
    code, out = run(tmp_path, capsys)
    assert code == 1
    assert out == [
        "local/cli.py: import cycle of 4 modules, over the limit of none: "
        "local/cli.py:2 -> local/demo.py:1 -> local/supervisor.py:1 -> local/zygote.py:1 -> local/cli.py"
    ]


def test_a_package_importing_its_children_and_sibling_scripts_are_no_cycle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a package re-exporting its child, the child importing a sibling module by full path,
    # and two function directories that each have a module named `handler` importing the core
    write(tmp_path, package("widgets"))
    write(
        tmp_path,
        {
            f"{CORE}/gears/__init__.py": "from punctual.gears.wheel import Wheel\n",
            f"{CORE}/gears/wheel.py": "from punctual.gears.spin import Spin\nimport punctual.widgets\n",
            f"{CORE}/gears/spin.py": "import json\n",
            "functions/api/handler.py": "from punctual.gears import Wheel\n",
            "functions/worker/handler.py": "import handler\nfrom punctual import widgets\n",
        },
    )
    code, out = run(tmp_path, capsys)
    assert (code, out[1:]) == (0, [])
    # ... and the imports were resolved (no cycle for want of seeing them): each to its own file
    modules = check.load(tmp_path)
    linked = {
        m.relative: [target for target, _ in m.imports]
        for m in check.link_imports(tmp_path, modules).values()
    }
    assert linked[f"{CORE}/gears/__init__.py"] == [f"{CORE}/gears/wheel.py"]
    assert linked[f"{CORE}/gears/wheel.py"] == [f"{CORE}/gears/spin.py", f"{CORE}/widgets.py"]
    assert linked["functions/api/handler.py"] == [f"{CORE}/gears/__init__.py"]
    assert linked["functions/worker/handler.py"] == [f"{CORE}/widgets.py"]  # itself is no import


def test_aws_clients_are_created_only_in_their_home(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a core module and a handler that make their own clients and sessions, and local mode
    # and a benchmark that do so too (they are allowed: they drive moto)
    write(tmp_path, package())
    write(
        tmp_path,
        {
            f"{CORE}/targets.py": (
                "import boto3\nfrom boto3.session import Session as S\n\n"
                "def call() -> None:\n    boto3.client('sts')\n    S(region_name='x').client('sqs')\n"
            ),
            "functions/worker/handler.py": "import boto3 as b\n\nSQS = b.resource('sqs')\n",
            "local/__init__.py": "",
            "local/server.py": "import boto3\n\nDDB = boto3.client('dynamodb')\n",
            "bench/run.py": "import boto3\n\nDDB = boto3.client('dynamodb')\n",
        },
    )
    code, out = run(tmp_path, capsys)
    assert code == 1
    assert out == [
        f"functions/worker/handler.py:3: boto3.resource() creates an AWS client outside its one home, {CLIENT_HOME}",
        f"{CORE}/targets.py:5: boto3.client() creates an AWS client outside its one home, {CLIENT_HOME}",
        f"{CORE}/targets.py:6: boto3.session.Session() creates an AWS client outside its one home, {CLIENT_HOME}",
    ]


def test_the_environment_is_read_only_in_the_settings_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, package())
    write(
        tmp_path,
        {
            f"{CORE}/arns.py": "import os\n\nREGION = os.environ.get('AWS_REGION') or os.getenv('X')\n",
            f"{CORE}/service.py": "from os import environ\n\ndef name() -> str:\n    return environ['N']\n",
            "local/__init__.py": "",
            "local/config.py": "import os\n\nPORT = os.environ.get('PORT')\n",
        },
    )
    code, out = run(tmp_path, capsys)
    assert code == 1
    assert out == [
        f"{CORE}/arns.py:3: os.environ reads the environment outside its one home, {ENV_HOME}",
        f"{CORE}/arns.py:3: os.getenv reads the environment outside its one home, {ENV_HOME}",
        f"{CORE}/service.py:4: os.environ reads the environment outside its one home, {ENV_HOME}",
    ]


def test_the_cache_never_hides_a_change(tmp_path: Path) -> None:
    # Given a clean tree checked once with the cache, then a module grown past the limit
    tree, cache = tmp_path / "tree", tmp_path / "cache.json"
    write(tree, {"bench/grows.py": "x = 1\n"})
    assert check.violations(tree, cache) == []
    assert cache.exists()
    write(tree, {"bench/grows.py": "x = 1\n" * 900})
    # When it runs again with the same cache / Then the new content is what it measures
    assert check.violations(tree, cache) == [
        "bench/grows.py: module has 900 lines, over the limit of 800 lines per module"
    ]
    assert check.violations(tree, cache) == check.violations(tree, None)


def test_a_cold_run_over_many_files_parses_in_parallel_alike(tmp_path: Path) -> None:
    # Enough files for the process pool: the same answer as one by one
    files = {
        f"bench/m{i}.py": f"import m{(i + 1) % check.PARALLEL_FROM}\n" for i in range(check.PARALLEL_FROM)
    }
    write(tmp_path, files)
    found = check.violations(tmp_path, None)
    assert len(found) == 1
    assert found[0].startswith("bench/m0.py: import cycle of 64 modules")
