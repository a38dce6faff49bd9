"""`manage.py check --deploy` with the production settings prints no warning; Hyphae's own
deploy checks (hyphae.W002–W007) name the variable and the fix of each danger."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import ProgrammingError

from core import checks

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings.production",
    "SECRET_KEY": "x7Gq2vN9pL4sT8wB1mK6rY3zH5jD0cF9aE2uQ7iO4nV8gS1bW6tX3yR5kM0lP9dZ",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/test",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
    "CACHE_URL": "redis://127.0.0.1:6379/1",
    "ALLOWED_HOSTS": "hyphae.example.com",
    # what a deployment chooses: random values of at least 32 characters
    "HOST_API_TOKEN": "Zk3vQ9-long-random-service-token-4hT8wN1xR",
    "HOST_SECRET_KEY": "pL4sT8wB1mK6rY3zH5jD0cF9aE2uQ7iO4nV8gS1b",
}


def run_check(extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **PRODUCTION_ENV, **extra}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_production_settings():
    done = run_check({})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_production_refuses_to_start_without_a_secret_key():
    done = run_check({"SECRET_KEY": ""})
    assert done.returncode != 0
    assert "SECRET_KEY must be set in production" in done.stderr


def test_check_deploy_names_each_of_hyphaes_dangers():
    done = run_check(
        {
            "HOST_SECRET_KEY": "",
            "HOST_API_TOKEN": "short-token",
            "HOST_METRICS_NETWORKS": "0.0.0.0/0",
            "HOST_PROXY_AUTH": "true",
            "HOST_TRUSTED_PROXIES": "::/0",
        }
    )
    assert done.returncode != 0
    for check_id in ("hyphae.W002", "hyphae.W003", "hyphae.W004", "hyphae.W005"):
        assert check_id in done.stderr + done.stdout
    assert "short-token" not in done.stderr + done.stdout  # a token is never shown


def test_a_deployment_may_turn_the_hsts_flags_off_and_check_deploy_then_says_so():
    """On by default (a clean `check --deploy`, spec 08); a deployment whose subdomains are
    not all HTTPS-only turns them off, and Django's own deploy checks then say so."""
    done = run_check({"SECURE_HSTS_INCLUDE_SUBDOMAINS": "false", "SECURE_HSTS_PRELOAD": "false"})
    assert "security.W005" in done.stderr + done.stdout
    assert "security.W021" in done.stderr + done.stdout


GOOD = "pL4sT8wB1mK6rY3zH5jD0cF9aE2uQ7iO4nV8gS1b"


def ids(messages: list) -> list[str]:
    return [message.id for message in messages]


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("", ["hyphae.W002"]),
        ("short-but-random-31-chars-xxxxx", ["hyphae.W002"]),
        ("a" * 40, ["hyphae.W002"]),
        (GOOD, []),
    ],
)
def test_the_secrets_key_must_be_set_and_long(settings, value, found):
    settings.HOST_SECRET_KEY = value
    messages = checks.secret_key_check()
    assert ids(messages) == found
    assert all("HOST_SECRET_KEY" in m.msg and "HOST_SECRET_KEY" in m.hint for m in messages)


def test_every_service_token_must_be_long(settings):
    settings.HOST_API_TOKEN = [GOOD, "rotated-but-short"]
    [warning] = checks.api_token_check()
    assert warning.id == "hyphae.W003"
    assert "HOST_API_TOKEN: token 2 of the list is shorter than 32 characters" in warning.msg
    assert "rotated-but-short" not in warning.msg + warning.hint
    settings.HOST_API_TOKEN = [GOOD]
    assert checks.api_token_check() == []


def networks(*values: str) -> list:
    return [ipaddress.ip_network(value) for value in values]


def test_metrics_open_to_every_address_warn_token_or_not(settings):
    settings.HOST_METRICS_NETWORKS = networks("127.0.0.0/8", "::/0")
    settings.HOST_METRICS_TOKEN = ""
    [warning] = checks.metrics_access_check()
    assert warning.id == "hyphae.W004"
    assert "HOST_METRICS_NETWORKS contains ::/0" in warning.msg
    # the token admits callers from elsewhere; it keeps nobody from a listed network out
    settings.HOST_METRICS_TOKEN = GOOD
    assert ids(checks.metrics_access_check()) == ["hyphae.W004"]
    settings.HOST_METRICS_NETWORKS = networks("10.0.0.0/8")
    assert checks.metrics_access_check() == []


def test_forward_auth_needs_its_proxies_and_only_them(settings):
    settings.HOST_PROXY_AUTH = False
    settings.HOST_TRUSTED_PROXIES = networks("0.0.0.0/0")
    assert checks.proxy_auth_check() == []  # not used: nothing to trust
    settings.HOST_PROXY_AUTH = True
    [everyone] = checks.proxy_auth_check()
    assert everyone.id == "hyphae.W005"
    assert "HOST_TRUSTED_PROXIES contains 0.0.0.0/0" in everyone.msg
    settings.HOST_TRUSTED_PROXIES = []
    [nobody] = checks.proxy_auth_check()
    assert nobody.id == "hyphae.W006"
    assert "HOST_TRUSTED_PROXIES is empty" in nobody.msg
    settings.HOST_TRUSTED_PROXIES = networks("10.0.0.5/32")
    assert checks.proxy_auth_check() == []


def test_secrets_no_configured_key_can_read_are_counted_when_the_database_is_checked(db, settings):
    from extensions_host.contributions.services.stores import keyring, secret_set
    from extensions_host.models import RosterEntry

    RosterEntry.objects.create(id="vault", version="1.0.0", revision="r1")
    settings.HOST_SECRET_KEY = "the-key-that-was-lost-" + "x" * 20
    _, lost_id, _ = keyring()
    secret_set(extension_id="vault", key="a", value="alpha")
    secret_set(extension_id="vault", key="b", value="beta")
    assert checks.unreadable_secrets_check(databases=["default"]) == []
    settings.HOST_SECRET_KEY = GOOD
    assert checks.unreadable_secrets_check() == []  # no database asked for: not read
    [warning] = checks.unreadable_secrets_check(databases=["default"])
    assert warning.id == "hyphae.W007"
    assert "2 extension secret(s)" in warning.msg
    assert f"vault (key id {lost_id}): 2" in warning.msg
    assert "HOST_SECRET_KEYS_OLD" in warning.hint
    settings.HOST_SECRET_KEYS_OLD = ["the-key-that-was-lost-" + "x" * 20]
    assert checks.unreadable_secrets_check(databases=["default"]) == []


def test_the_secrets_check_says_nothing_without_tables(monkeypatch):
    def no_tables() -> dict:
        raise ProgrammingError("relation does not exist")

    monkeypatch.setattr(checks, "unreadable_secrets", no_tables)
    assert checks.unreadable_secrets_check(databases=["default"]) == []
