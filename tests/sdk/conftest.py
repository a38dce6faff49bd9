"""Fixtures for the SDK's own tests: the author harness's host."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def hyphae_host(db: None, tmp_path: Path) -> Iterator[object]:
    """The author harness's host (the plugin's fixture, without registering the plugin here:
    the examples' conftest registers it, and importing it first would bypass pytest's
    assertion rewriting of the plugin module)."""
    from extensions_host.testing.host import running_host

    with running_host(data_dir=tmp_path / "hyphae-data") as host:
        yield host
