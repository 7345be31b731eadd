"""One ``punctual-local up`` shared by the e2e tests, killed (its whole process group) at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from local_harness import LocalMode, start_local_mode, stop_group, wait_ready


@pytest.fixture(scope="session")
def local_mode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMode]:
    """One local mode for the e2e session: demo on (tenant ``demo``), tests use tenant ``e2e``."""
    local = start_local_mode(tmp_path_factory.mktemp("local-mode"))
    try:
        wait_ready(local)
        yield local
    finally:
        stop_group(local.process)
