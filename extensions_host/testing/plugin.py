"""The pytest fixtures of the author harness (registered by `extensions_host.testing`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from extensions_host.testing.host import TestHost, running_host


@pytest.fixture
def hyphae_host(db: Any, tmp_path: Path) -> Iterator[TestHost]:
    """A test host: the test database, a fake host clock (2026-01-01T00:00:00Z, moved only by
    the test), the extensions' `data`/`cache`/`state` directories under the test's own
    temporary folder, and nothing installed until `hyphae_host.install(...)`."""
    with running_host(data_dir=tmp_path / "hyphae-data") as host:
        yield host
