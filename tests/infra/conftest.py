"""Synthesise the CDK app once per session (per context variant) and share the results.

Synthesis runs from the repository root (asset paths are relative to it), without Docker and
without network. Every synth runs cdk-nag: a finding that is not acknowledged fails the fixture,
and so every test that uses it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cdk_helpers import BURST_CONTEXT, CUSTOM_CONTEXT, REPO_ROOT, Synth, synthesise


@pytest.fixture(scope="session", autouse=True)
def repo_root() -> Iterator[Path]:
    previous = Path.cwd()
    os.chdir(REPO_ROOT)
    yield REPO_ROOT
    os.chdir(previous)


@pytest.fixture(scope="session")
def default_synth(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The app with cdk.json's defaults."""
    return synthesise(tmp_path_factory.mktemp("cdk-default"))


@pytest.fixture(scope="session")
def custom_synth(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The app with the production options of :data:`CUSTOM_CONTEXT`."""
    return synthesise(tmp_path_factory.mktemp("cdk-custom"), CUSTOM_CONTEXT)


@pytest.fixture(scope="session")
def burst_synth(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The app with the burst-ready capacity profile's context (:data:`BURST_CONTEXT`)."""
    return synthesise(tmp_path_factory.mktemp("cdk-burst"), BURST_CONTEXT)


@pytest.fixture(scope="session", params=["default", "custom", "burst"])
def any_synth(request: pytest.FixtureRequest) -> Synth:
    """Each variant in turn, for properties that must hold in every deployment shape."""
    return request.getfixturevalue(f"{request.param}_synth")
