"""Fixtures for the author-kit tests: the example packages on the path, the harness."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

EXAMPLES = Path(settings.BASE_DIR) / "examples"
EXAMPLE_NAMES = ("reminders", "digest", "approvals", "chaos")


@pytest.fixture
def examples_importable(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each example's source folder on the path (as `make run`'s PYTHONPATH puts them)."""
    for name in EXAMPLE_NAMES:
        folder = str(EXAMPLES / name)
        if folder not in sys.path:
            monkeypatch.syspath_prepend(folder)
    yield


@pytest.fixture
def hyphae_host(db: None, tmp_path: Path) -> Iterator[object]:
    """The author harness's host (the plugin's fixture, without registering the plugin here:
    the examples' conftest registers it, and importing it first would bypass pytest's
    assertion rewriting of the plugin module)."""
    from extensions_host.testing.host import running_host

    with running_host(data_dir=tmp_path / "hyphae-data") as host:
        yield host
