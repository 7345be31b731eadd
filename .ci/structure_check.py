"""The project's structure check, run by ``make lint``: the rules that keep the tree readable.

Over every Python file of the repository (runtime code in ``layers/``, ``functions/``, ``infra/``,
``cdk/``, ``clients/``, ``local/``; and ``tests/``, ``bench/``, the chaos harness, ``examples/``,
``.ci/``; only caches, virtual environments and build output are skipped):

- **size**: no module over 800 lines, no class over 400 lines (decorators included). There is no
  exemption list: the tree holds no generated Python file today; one would be named here.
- **import cycles**: none among first-party modules. Every import counts, at module level or
  inside a function (a function-level import that closes a cycle is a cycle; moving an import
  into a function hides a cycle from Python, not from the reader), and so does one under
  ``if TYPE_CHECKING:`` (a type-only cycle is still two modules that each need the other).
  ``from a.b import c`` depends on the
  module ``a.b.c`` when there is one, else on ``a.b``; the packages initialised on the way are
  not counted (a package's ``__init__`` importing its children is the normal direction).
- **one home for AWS clients**: in the code Lambda runs (the core package and the function
  handlers), boto3/botocore clients, resources and sessions are created only in ``punctual.runtime.aws``
  (the one factory: shared retry configuration, one client per service per process). Local
  mode, the benchmarks and the tests make their own clients against moto on purpose (they are
  the emulated cloud's callers, not the product) and are outside this rule; so are the CDK app
  and the CLI (its own distribution: it signs with a botocore session and hands its users a
  boto3 Scheduler client).
- **one home for the environment**: in the code Lambda runs, ``os.environ`` / ``os.getenv`` /
  ``os.putenv`` are read only in ``punctual.runtime.settings`` (the settings model, validated at cold
  start). Local mode, the benchmarks, the tests, the CDK app (``CDK_*`` variables by CDK's own
  convention) and the CLI (its documented ``PUNCTUAL_ENDPOINT``) configure processes and are
  outside this rule.

Usage: ``python .ci/structure_check.py [REPO_ROOT]``. One line per violation naming the file, the
limit and the measured value; exit 1 when there is any, 0 (and one summary line) when none.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 400

# Directories that hold no source of ours (caches, environments, build and synth output).
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "venv",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
        ".local",
        ".schemathesis",
        "cdk.out",
        "build",
        "site",
    }
)

# Each file's facts, by content: a run over an unchanged tree parses nothing (git-ignored).
CACHE_FILE = ".ci/.cache/structure_check.json"

# A cold run over this many files or more parses them in a process per core.
PARALLEL_FROM = 64

# Package roots on every process's import path (the layer, the CLI, the construct library, the
# repository root for local/ and infra/), searched after a file's own import root.
PACKAGE_ROOTS = ("layers/core/python", "clients/python", "cdk", ".")

# The code Lambda runs: the rules on AWS clients and the environment hold here.
LAMBDA_CODE = ("layers/core/python/", "functions/")


@dataclass(frozen=True)
class Home:
    """Where one kind of call may be made, for the files under some prefixes of the tree."""

    scope: tuple[str, ...]  # path prefixes (relative, with '/') the rule covers
    module: str  # dotted name of the one module allowed to make the call


CLIENT_HOMES = (Home(LAMBDA_CODE, "punctual.runtime.aws"),)
ENVIRONMENT_HOMES = (Home(LAMBDA_CODE, "punctual.runtime.settings"),)

# boto3/botocore callables that create a client, a resource or a session.
CLIENT_FACTORIES = frozenset(
    {
        "boto3.client",
        "boto3.resource",
        "boto3.Session",
        "boto3.session.Session",
        "botocore.session.Session",
        "botocore.session.get_session",
        "botocore.session.create_session",
    }
)
ENVIRONMENT_NAMES = frozenset({"os.environ", "os.environb", "os.getenv", "os.getenvb", "os.putenv"})


@dataclass
class Facts:
    """What the rules need from one file, read once from its syntax tree (and cached by content)."""

    lines: int
    classes: list[tuple[str, int, int]]  # (name, line, length in lines)
    imports: list[tuple[int, str, list[str], int]]  # (level, module or "", names, line); level -1: `import`
    calls: list[tuple[str, int]]  # (qualified callee, line): candidate client creations
    names: list[tuple[str, int]]  # (qualified name, line): candidate environment reads


@dataclass
class Module:
    """One source file: where it is, the dotted name it is imported by, and its facts."""

    relative: str  # path from the repository root, with '/'
    name: str  # dotted module name from its import root
    import_root: Path
    is_package: bool
    facts: Facts
    imports: list[tuple[str, int]] = field(default_factory=list)  # (first-party module's path, line)


def python_files(root: Path) -> Iterator[Path]:
    """Every ``.py`` file under ``root``, skipping the directories that hold no source of ours."""
    for entry in sorted(root.iterdir()):
        if entry.is_dir():
            if entry.name not in SKIPPED_DIRS and not entry.name.endswith(".egg-info"):
                yield from python_files(entry)
        elif entry.suffix == ".py":
            yield entry


def import_root_of(path: Path) -> Path:
    """The directory Python would have on its path to import ``path``: the first without ``__init__``."""
    directory = path.parent
    while (directory / "__init__.py").exists():
        directory = directory.parent
    return directory


def dotted_name(import_root: Path, path: Path) -> str:
    parts = list(path.relative_to(import_root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_facts(text: str, filename: str) -> Facts:
    tree = ast.parse(text, filename)
    classes = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            classes.append((node.name, node.lineno, (node.end_lineno or node.lineno) - first + 1))
    imports: list[tuple[int, str, list[str], int]] = []
    for statement in statements(tree):
        if isinstance(statement, ast.Import):
            imports += [(-1, alias.name, [], statement.lineno) for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom):
            aliases = [alias.name for alias in statement.names]
            imports.append((statement.level, statement.module or "", aliases, statement.lineno))
    calls, names = qualified_uses(tree)
    return Facts(len(text.splitlines()), classes, imports, calls, names)


def cached_facts(root: Path, files: list[Path], cache_file: Path | None) -> list[Facts]:
    """Each file's facts, reusing the cache's entry for a file whose content it has seen."""
    version = hashlib.sha1(Path(__file__).read_bytes()).hexdigest()
    cache: dict[str, Any] = {}
    if cache_file is not None and cache_file.exists():
        try:
            cache = json.loads(cache_file.read_text())
        except ValueError:
            cache = {}
        if cache.get("version") != version:
            cache = {}
    entries: dict[str, list[Any]] = cache.get("files", {})
    contents = [path.read_bytes() for path in files]
    digests = [hashlib.sha1(data).hexdigest() for data in contents]
    unseen = [i for i, digest in enumerate(digests) if digest not in entries]
    texts = [contents[i].decode("utf-8") for i in unseen]
    filenames = [str(files[i]) for i in unseen]
    if len(unseen) >= PARALLEL_FROM:
        with ProcessPoolExecutor() as pool:  # parsing is the cost of a cold run: use every core
            parsed = list(pool.map(read_facts, texts, filenames, chunksize=16))
    else:
        parsed = [read_facts(text, filename) for text, filename in zip(texts, filenames, strict=True)]
    fresh = {digest: entries[digest] for digest in digests if digest in entries}
    for i, facts in zip(unseen, parsed, strict=True):
        fresh[digests[i]] = [facts.lines, facts.classes, facts.imports, facts.calls, facts.names]
    found = [Facts(*fresh[digest]) for digest in digests]
    if cache_file is not None and fresh != entries:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps({"version": version, "files": fresh}))
    return found


def load(root: Path, cache_file: Path | None = None) -> list[Module]:
    files = list(python_files(root))
    modules = []
    for path, facts in zip(files, cached_facts(root, files, cache_file), strict=True):
        import_root = import_root_of(path)
        modules.append(
            Module(
                relative=path.relative_to(root).as_posix(),
                name=dotted_name(import_root, path),
                import_root=import_root,
                is_package=path.name == "__init__.py",
                facts=facts,
            )
        )
    return modules


# --- size -----------------------------------------------------------------------------------


def size_violations(modules: Iterable[Module]) -> Iterator[str]:
    for module in modules:
        if module.facts.lines > MAX_MODULE_LINES:
            yield (
                f"{module.relative}: module has {module.facts.lines} lines, "
                f"over the limit of {MAX_MODULE_LINES} lines per module"
            )
        for name, line, length in module.facts.classes:
            if length > MAX_CLASS_LINES:
                yield (
                    f"{module.relative}:{line}: class {name} has {length} lines, "
                    f"over the limit of {MAX_CLASS_LINES} lines per class"
                )


# --- imports --------------------------------------------------------------------------------


def statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """Every statement of the module, at any depth (bodies of functions, classes, ifs, trys...).

    Imports are statements: walking statements only (not expressions) finds them all, quickly.
    """
    stack: list[ast.AST] = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.stmt):
            yield node
        for _, value in ast.iter_fields(node):
            if isinstance(value, list):
                stack.extend(
                    reversed(
                        [v for v in value if isinstance(v, ast.stmt | ast.excepthandler | ast.match_case)]
                    )
                )


class ModuleIndex:
    """Dotted names to first-party modules, per import root (two functions both have a ``handler``)."""

    def __init__(self, root: Path, modules: Iterable[Module]) -> None:
        self.root = root
        self.by_root: dict[Path, dict[str, Module]] = {}
        for module in modules:
            self.by_root.setdefault(module.import_root, {})[module.name] = module
        self.package_roots = [(root / p).resolve() for p in PACKAGE_ROOTS]
        self.resolved = {import_root: import_root.resolve() for import_root in self.by_root}

    def search_path(self, module: Module) -> list[dict[str, Module]]:
        """A file's own import root and the ones above it (pytest's rootdir conftest), then the packages'."""
        roots: list[Path] = []
        directory = module.import_root.resolve()
        while True:
            roots.append(directory)
            if directory == self.root.resolve() or directory.parent == directory:
                break
            directory = directory.parent
        roots += [r for r in self.package_roots if r not in roots]
        by_directory = {self.resolved[r]: names for r, names in self.by_root.items()}
        return [by_directory[directory] for directory in roots if directory in by_directory]

    def resolve(self, target: str, path: list[dict[str, Module]]) -> Module | None:
        """The longest first-party module that prefixes ``target``, first root that has one."""
        for names in path:
            name = target
            while name:
                if name in names:
                    return names[name]
                name = name.rpartition(".")[0]
        return None


def imported_names(module: Module) -> Iterator[tuple[list[str], int]]:
    """For each import statement: the dotted names it may load, most specific first."""
    for level, source, names, line in module.facts.imports:
        if level < 0:
            yield [source], line
            continue
        if level:
            base = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
            base = base[: len(base) - (level - 1)]
            source = ".".join(base + ([source] if source else []))
        for alias in names:
            yield [f"{source}.{alias}", source], line


def link_imports(root: Path, modules: list[Module]) -> dict[str, Module]:
    """Fill each module's first-party imports; answer the modules by their repository path."""
    index = ModuleIndex(root, modules)
    for module in modules:
        path = index.search_path(module)
        seen: set[str] = set()
        for candidates, line in imported_names(module):
            for candidate in candidates:
                target = index.resolve(candidate, path) if candidate else None
                if target is not None:
                    if target is not module and target.relative not in seen:
                        seen.add(target.relative)
                        module.imports.append((target.relative, line))
                    break
    return {m.relative: m for m in modules}


def strongly_connected(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the components of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, []))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def shortest_cycle(start: str, edges: dict[str, list[str]], members: set[str]) -> list[str]:
    """The shortest path from ``start`` back to itself inside one component (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in edges[node]:
                if child not in members:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return [start]  # not reached: every node of a component lies on a cycle


def cycle_violations(by_path: dict[str, Module]) -> Iterator[str]:
    edges = {path: [target for target, _ in module.imports] for path, module in by_path.items()}
    for component in strongly_connected(edges):
        cycle = shortest_cycle(component[0], edges, set(component))
        steps = []
        for here, there in itertools.pairwise(cycle):
            line = next(line for target, line in by_path[here].imports if target == there)
            steps.append(f"{here}:{line}")
        others = f" ({len(component)} modules in the tangle)" if len(component) > len(cycle) - 1 else ""
        yield (
            f"{cycle[0]}: import cycle of {len(cycle) - 1} modules, over the limit of none: "
            f"{' -> '.join(steps)} -> {cycle[0]}{others}"
        )


# --- one home for clients and the environment ------------------------------------------------


def qualified(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """``boto3.session.Session`` for an expression naming it, through the module's import aliases."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    head = aliases.get(node.id)
    if head is None:
        return None
    return ".".join([head, *reversed(parts)])


def import_aliases(tree: ast.AST) -> dict[str, str]:
    """Local names bound by imports anywhere in the module, to the dotted name they stand for."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    aliases[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def qualified_uses(tree: ast.AST) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The calls to client factories and the uses of environment names, in source order."""
    aliases = import_aliases(tree)
    calls: list[tuple[int, int, str]] = []
    names: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callee = qualified(node.func, aliases)
            if callee in CLIENT_FACTORIES:
                calls.append((node.lineno, node.col_offset, callee))
        elif isinstance(node, ast.Attribute | ast.Name):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
                continue  # the inner attribute of a chain is seen on its own
            name = qualified(node, aliases)
            if name in ENVIRONMENT_NAMES:
                names.append((node.lineno, node.col_offset, name))
    # one line per name and line: `os.environ.get(a) or os.environ.get(b)` is one finding
    return (
        list(dict.fromkeys((n, line) for line, _, n in sorted(calls))),
        list(dict.fromkeys((n, line) for line, _, n in sorted(names))),
    )


def home_violations(modules: Iterable[Module]) -> Iterator[str]:
    for module in modules:
        for home in CLIENT_HOMES:
            if module.relative.startswith(home.scope) and module.name != home.module:
                for callee, line in module.facts.calls:
                    yield (
                        f"{module.relative}:{line}: {callee}() creates an AWS client outside its "
                        f"one home, {home.module}"
                    )
        for home in ENVIRONMENT_HOMES:
            if module.relative.startswith(home.scope) and module.name != home.module:
                for name, line in module.facts.names:
                    yield (
                        f"{module.relative}:{line}: {name} reads the environment outside its "
                        f"one home, {home.module}"
                    )


def violations(root: Path, cache_file: Path | None = None) -> list[str]:
    """Every violation in the tree at ``root``, one line each, by rule then by file."""
    modules = load(root, cache_file)
    by_path = link_imports(root, modules)
    homes = list(home_violations(modules))
    return [*size_violations(modules), *cycle_violations(by_path), *homes]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else Path(__file__).resolve().parents[1])
    found = violations(root, root / CACHE_FILE)
    for line in found:
        print(line)
    if found:
        print(f"structure check: {len(found)} violation(s)", file=sys.stderr)
        return 1
    print("structure check: no module over 800 lines, no class over 400, no import cycle, one home each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
