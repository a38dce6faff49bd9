"""Shared fixtures: personas, API clients, the fake clock, PostgreSQL markers."""

from __future__ import annotations

import os

import pytest
from django.db import connection
from rest_framework.test import APIClient

from core import auth, clock

SERVICE_TOKEN = "test-service-token"


def broker_url_from_env() -> str:
    """The broker of the tests that start real Celery processes: `TEST_BROKER_URL`, else a
    Redis `CELERY_BROKER_URL` from the environment (spec 08 names it; the test settings keep
    this process on `memory://`), else "" (those tests use a temporary filesystem broker or
    skip with their reason)."""
    url = os.environ.get("TEST_BROKER_URL", "")
    if url:
        return url
    celery = os.environ.get("CELERY_BROKER_URL", "")
    return celery if celery.startswith(("redis://", "rediss://")) else ""


def pytest_collection_modifyitems(config, items):
    """Skip `postgres` tests with a visible reason when the database is SQLite."""
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL=postgres://…")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _forget_service_user():
    """Each test's database is rolled back: the service user kept by `core.auth` goes too."""
    auth.forget_service_user()
    yield
    auth.forget_service_user()


@pytest.fixture
def fake_clock():
    with clock.fake_clock() as fake:
        yield fake


@pytest.fixture
def make_user(db, django_user_model):
    def make(username: str, **extra):
        return django_user_model.objects.create_user(
            username=username, password="pw-" + username, **extra
        )

    return make


@pytest.fixture
def owner(make_user):
    return make_user("owner")


@pytest.fixture
def member(make_user):
    return make_user("member")


@pytest.fixture
def outsider(make_user):
    return make_user("outsider")


@pytest.fixture
def staff(make_user):
    return make_user("staff", is_staff=True, is_superuser=True)


@pytest.fixture
def api():
    """An API client factory: `api(user)` authenticates with a real API token for that user;
    `api(None)` is anonymous; `api("service")` uses the service token."""
    from core.services import token_create

    def make(who, scope: str = "write") -> APIClient:
        client = APIClient()
        if who == "service":
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {SERVICE_TOKEN}")
        elif who is not None:
            _, raw = token_create(user=who, name="test", scope=scope, expires_at=None)
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    return make


@pytest.fixture
def client_for(api, owner, member, staff):
    """Persona → API client: the owner, another user, an admin, anonymous, the runtime."""

    def make(persona: str, scope: str = "write"):
        who = {
            "owner": owner,
            "other": member,
            "admin": staff,
            "anonymous": None,
            "service": "service",
        }[persona]
        return api(who, scope=scope)

    return make


@pytest.fixture
def install(db):
    """`install(ext, …)`: run with exactly these extensions loaded and sync the roster (a later
    call replaces the set, like a deploy); `sync=False` only loads them."""
    from contextlib import ExitStack

    from extensions_host import registry
    from extensions_host.runtime import forget_activations
    from extensions_host.services.roster import roster_sync

    stack = ExitStack()

    def do(*definitions, sync: bool = True) -> None:
        stack.enter_context(registry.installed(*definitions))
        forget_activations()
        if sync:
            roster_sync()

    yield do
    stack.close()
    forget_activations()
