"""Build the Lambda layer (the ``punctual`` core package and its dependencies) without Docker.

The layer's content is ``build/layer/python/...``: what ``pip install --platform`` resolves for
the Lambda runtime (Python 3.14 on arm64, binary wheels only), plus a copy of the core sources.
It ships only what the runtime imports: requirements.txt lists the core's imports and nothing
else, the core package holds only modules a handler or the ECS worker reaches (both checked by
``tests/unit/test_layer_contents.py``); the ``punctual`` command is ``clients/python``, local
mode's code ``local/``; the in-memory twins of the store's ports (``store/memory/``, used by
tests and benchmarks; no shipped module imports them) stay in the source tree beside their
ports but out of the layer (:data:`NOT_SHIPPED`), as do the operator's commands (``admin/``).
boto3 is left out: the runtime ships it (with botocore's own python-dateutil, which nothing in
the layer needs). The build is skipped when a stamp, keyed on
a hash of its inputs (requirements.txt, the core sources, the pip arguments), matches; it is
rebuilt in a temporary folder and swapped in, so an interrupted build never leaves a half
layer behind.

Usage: ``python infra/build_layer.py [--force]`` from the repository root (``make layer``).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == REPO_ROOT / "infra":
    sys.path[0] = str(REPO_ROOT)  # run as a script: import `infra` as a package, not its modules

from punctual_cdk import constants as c  # noqa: E402

REQUIREMENTS = REPO_ROOT / "requirements.txt"
CORE_DIR = REPO_ROOT / c.CORE_PACKAGE_DIR
LAYER_DIR = REPO_ROOT / c.LAYER_ASSET_DIR
STAMP = LAYER_DIR.with_name(LAYER_DIR.name + ".stamp")
PIP_ARGS = (
    "--no-compile",  # .pyc of the build machine's Python would be useless on 3.14
    "--disable-pip-version-check",
    "--quiet",
    "--platform",
    c.LAMBDA_PLATFORM_TAG,
    "--only-binary=:all:",
    "--python-version",
    c.LAMBDA_PYTHON_VERSION,
    "--implementation",
    "cp",
)
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
# Folders of the core package left out of the layer, relative to it: the store's test twins, and
# the operator's commands (run from a clone, never by the stack).
NOT_SHIPPED = ("store/memory", "admin")


def shipped(path: Path) -> bool:
    """Whether a file of the core package goes into the layer."""
    relative = path.relative_to(CORE_DIR).as_posix()
    return not any(relative == folder or relative.startswith(folder + "/") for folder in NOT_SHIPPED)


def _ignored(folder: str, names: list[str]) -> set[str]:
    here = Path(folder)
    return set(_IGNORED(folder, names)) | {name for name in names if not shipped(here / name)}


def core_sources() -> list[Path]:
    """The files of the core package that go into the layer, in a stable order."""
    return sorted(
        path
        for path in CORE_DIR.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc" and shipped(path)
    )


def inputs_hash() -> str:
    """A hash of everything the layer is built from."""
    digest = hashlib.sha256()
    digest.update(" ".join(PIP_ARGS).encode())
    digest.update(REQUIREMENTS.read_bytes())
    for path in core_sources():
        digest.update(str(path.relative_to(CORE_DIR)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def build(force: bool = False) -> bool:
    """Build the layer unless it is up to date; return whether it was built."""
    if not CORE_DIR.is_dir():
        raise SystemExit(f"the core package is missing: {CORE_DIR}")
    wanted = inputs_hash()
    if not force and LAYER_DIR.is_dir() and STAMP.is_file() and STAMP.read_text().strip() == wanted:
        print(f"layer up to date: {LAYER_DIR.relative_to(REPO_ROOT)} ({wanted[:12]})")
        return False

    staging = LAYER_DIR.with_name(LAYER_DIR.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    target = staging / "python"
    target.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip", "install", *PIP_ARGS, "-t", str(target)]
    subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
    shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts: of no use in a layer
    shutil.copytree(CORE_DIR, target / "punctual", ignore=_ignored)

    shutil.rmtree(LAYER_DIR, ignore_errors=True)
    staging.rename(LAYER_DIR)
    STAMP.write_text(wanted + "\n")
    files = [p for p in LAYER_DIR.rglob("*") if p.is_file()]
    size_mb = sum(p.stat().st_size for p in files) / 1e6
    where = LAYER_DIR.relative_to(REPO_ROOT)
    print(f"layer built: {where} ({size_mb:.1f} MB in {len(files)} files, {wanted[:12]})")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if the stamp matches")
    build(force=parser.parse_args().force)


if __name__ == "__main__":
    main()
