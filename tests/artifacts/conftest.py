"""Fixtures for the artifact store: a world (conversation) and context builders."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.artifacts.helpers import make_world


@pytest.fixture
def world(owner):
    return make_world(owner, "world-1")


@pytest.fixture
def console(staff):
    """A staff user signed in to the admin."""
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture(autouse=True)
def _clean_cache():
    """save=none payloads live in the cache; every test starts from an empty one."""
    from django.core.cache import cache

    from artifacts.ephemeral import ephemeral_cache

    for each in (cache, ephemeral_cache()):
        each.clear()
    yield
    for each in (cache, ephemeral_cache()):
        each.clear()
