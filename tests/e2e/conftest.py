"""One ``punctual-local up`` shared by the e2e tests (:mod:`local.harness`), stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from local import harness
from local.harness import LocalMode

TENANT = "e2e"


@pytest.fixture(scope="session")
def local_mode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMode]:
    """One local mode for the e2e session: demo on (tenant ``demo``), tests use tenant ``e2e``."""
    with harness.running(tmp_path_factory.mktemp("local-mode"), tenant=TENANT) as local:
        yield local
