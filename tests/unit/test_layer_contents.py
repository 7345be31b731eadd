"""The Lambda layer ships only what the runtime imports (issue 18, point 5).

The layer is the core package (``layers/core/python/punctual``) and requirements.txt
(``infra/build_layer.py``). These tests read the sources' import statements, so the layer
cannot grow back a module no function imports (the CLI, local mode's server, chaos tooling)
or a dependency the core does not use (croniter once was).
"""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions, requires
from pathlib import Path

from infra import build_layer

REPO = Path(__file__).resolve().parents[2]
CORE_ROOT = REPO / "layers" / "core" / "python"
CORE = CORE_ROOT / "punctual"
# What runs the layer: each Lambda handler, and the ECS worker's image (its Dockerfile's CMD).
ENTRY_FILES = sorted((REPO / "functions").glob("*/handler.py"))
ENTRY_MODULES = ("punctual.execution.worker_service",)
# The Lambda runtime provides these (and the ECS image installs boto3 itself).
RUNTIME_PROVIDED = {"boto3", "botocore"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(CORE_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# What the layer ships of the core (the in-memory store twins stay out: tests and benchmarks).
CORE_MODULES = {module_name(path): path for path in build_layer.core_sources() if path.suffix == ".py"}


def imported_names(path: Path, package: str) -> set[str]:
    """Every dotted name an import statement in ``path`` names (relative ones resolved)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)  # `from pkg import submodule`
    return names


def core_modules_named(names: set[str]) -> set[str]:
    """The core modules a set of imported names loads (a package's ``__init__`` included)."""
    found = set()
    for name in names:
        parts = name.split(".")
        found.update(
            ".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in CORE_MODULES
        )
    return found


def package_of(module: str) -> str:
    return module if CORE_MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def reached_from_entries() -> set[str]:
    to_visit = set(ENTRY_MODULES)
    for entry in ENTRY_FILES:
        to_visit |= core_modules_named(imported_names(entry, ""))
    reached: set[str] = set()
    while to_visit:
        module = to_visit.pop()
        if module not in reached:
            reached.add(module)
            to_visit |= core_modules_named(imported_names(CORE_MODULES[module], package_of(module)))
    return reached


def test_every_module_in_the_core_is_imported_by_the_runtime() -> None:
    assert len(ENTRY_FILES) >= 5, "the Lambda handlers were not found"
    unreached = sorted(set(CORE_MODULES) - reached_from_entries())
    assert unreached == [], (
        f"in the layer but imported by no function: {unreached} (move them out of the core)"
    )


def test_the_in_memory_twins_stay_in_the_source_tree_but_out_of_the_layer() -> None:
    twins = sorted(module_name(p) for p in (CORE / "store" / "memory").glob("*.py"))
    assert "punctual.store.memory" in twins and "punctual.store.dynamo" in CORE_MODULES
    assert not set(twins) & set(CORE_MODULES)
    assert not build_layer.shipped(CORE / "store" / "memory" / "jobs.py")
    assert build_layer.shipped(CORE / "store" / "memory.py")  # a name that only starts the same


def test_the_cli_local_mode_and_chaos_tooling_are_outside_the_layer() -> None:
    for module in ("punctual.cli", "punctual.cli_api", "punctual.client", "punctual.faults"):
        assert module not in CORE_MODULES
    assert "punctual.api.local_server" not in CORE_MODULES
    assert (REPO / "clients" / "python" / "punctual_cli" / "cli.py").is_file()
    assert (REPO / "local" / "api_gateway.py").is_file()
    assert (REPO / "local" / "chaos" / "faults" / "throttle.py").is_file()


def third_party_imports() -> set[str]:
    tops = set()
    for path in CORE_MODULES.values():
        for name in imported_names(path, "punctual"):
            top = name.split(".")[0]
            if top and top != "punctual" and top not in sys.stdlib_module_names and top != "__future__":
                tops.add(top)
    return tops


def distribution_name(requirement: str) -> str:
    return re.split(r"[=<>~!\[; (]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def requirements() -> list[str]:
    lines = (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return [distribution_name(line) for line in lines if line.strip() and not line.startswith("#")]


def with_dependencies(names: list[str]) -> set[str]:
    """The distributions pip installs for ``names``: them and their dependencies (no extras)."""
    found: set[str] = set()
    to_visit = list(names)
    while to_visit:
        name = to_visit.pop()
        if name not in found:
            found.add(name)
            to_visit += [distribution_name(r) for r in requires(name) or [] if "extra ==" not in r]
    return found


def test_every_runtime_requirement_is_imported_by_the_core_and_nothing_else_is_needed() -> None:
    # Given the import names each pinned distribution provides
    provides: dict[str, set[str]] = {}
    for top, distributions in packages_distributions().items():
        for distribution in distributions:
            provides.setdefault(distribution_name(distribution), set()).add(top)
    imported = third_party_imports()
    # Then each requirement is imported by some core module (croniter was not: it moved to dev)
    for requirement in requirements():
        tops = provides.get(requirement, set())
        assert tops, f"{requirement} is not installed"
        assert tops & imported, f"requirements.txt pins {requirement}, which no core module imports"
    # And the core imports nothing the layer (the requirements and what they pull in) or the runtime lacks
    shipped = set().union(*(provides.get(d, set()) for d in with_dependencies(requirements())))
    assert imported - shipped - RUNTIME_PROVIDED == set()


def test_the_chain_auditor_and_delay_chains_import_first_in_a_fresh_process() -> None:
    """QA27: ``punctual.usecases.delay_chains`` imported ``punctual.execution`` (its package
    imports the worker's modules, which import delay_chains back): imported first (the auditor's
    package, its handler's test alone), each failed with a circular ImportError."""
    import subprocess

    for module in ("punctual.auditing", "punctual.usecases.delay_chains"):
        result = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            env={"PYTHONPATH": str(CORE_ROOT), "PATH": ""},
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, f"{module}: {result.stderr.strip().splitlines()[-1:]}"
