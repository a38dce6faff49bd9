"""Housekeeping of the host core: expired sessions cleared daily, host-API call audit entries
pruned after HOST_AUDIT_HOST_CALLS_RETENTION_DAYS when set; both in pages."""

from __future__ import annotations

import datetime as dt
from functools import partial

import pytest
from django.contrib.sessions.models import Session
from django.utils import timezone

from core import clock, services, tasks
from core.models import AuditEntry
from core.services import audit_record

pytestmark = pytest.mark.django_db


# --- sessions --------------------------------------------------------------------------------


def session(key: str, *, expires_in: dt.timedelta) -> Session:
    return Session.objects.create(
        session_key=key, session_data="", expire_date=timezone.now() + expires_in
    )


def keys() -> set[str]:
    return set(Session.objects.values_list("session_key", flat=True))


def test_expired_sessions_are_cleared_and_live_ones_kept():
    session("expired", expires_in=-dt.timedelta(seconds=1))
    session("long-expired", expires_in=-dt.timedelta(days=200))
    session("live", expires_in=dt.timedelta(days=14))
    assert services.sessions_clear_expired() == (2, False)
    assert keys() == {"live"}


def test_sessions_are_cleared_one_page_oldest_first():
    for n in range(5):
        session(f"s{n}", expires_in=-dt.timedelta(days=10 - n))
    assert services.sessions_clear_expired(limit=2) == (2, True)
    assert keys() == {"s2", "s3", "s4"}


def test_the_cached_db_engine_is_cleared_in_pages_too(settings):
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
    session("expired", expires_in=-dt.timedelta(seconds=1))
    session("live", expires_in=dt.timedelta(days=1))
    assert services.sessions_clear_expired() == (1, False)
    assert keys() == {"live"}


def test_an_engine_without_a_table_clears_its_own_way(settings):
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"
    session("untouched", expires_in=-dt.timedelta(days=1))  # not this engine's
    assert services.sessions_clear_expired() == (0, False)
    assert keys() == {"untouched"}


def test_the_session_task_re_enqueues_itself_while_pages_are_full(
    monkeypatch, django_capture_on_commit_callbacks
):
    for n in range(5):
        session(f"s{n}", expires_in=-dt.timedelta(days=1))
    monkeypatch.setattr(
        services, "sessions_clear_expired", partial(services.sessions_clear_expired, limit=2)
    )
    enqueued: list[int] = []
    monkeypatch.setattr(tasks.clear_sessions, "delay", lambda: enqueued.append(1))
    calls = 0
    while True:
        calls += 1
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            tasks.clear_sessions()
        if not callbacks:
            break
    assert not Session.objects.exists()
    assert (calls, len(enqueued)) == (3, 2)


# --- audit entries of host-API calls ---------------------------------------------------------

# what staff, stops and resumes write: never pruned, however old
KEPT_FOREVER = (
    "extension_stopped",
    "extension_auto_resumed",
    "extension_resumed",
    "extension_grants_admitted",
    "token_created",
    "resume_selected",
    "user_deleted",
    "hostname_changed",  # starts with "host", not with "host."
)


def entry(action: str, *, age_days: float) -> AuditEntry:
    audit_record(actor="someone", action=action, target=action)
    row = AuditEntry.objects.filter(action=action).latest("id")
    AuditEntry.objects.filter(pk=row.pk).update(at=clock.now() - dt.timedelta(days=age_days))
    return row


def actions() -> set[str]:
    return set(AuditEntry.objects.values_list("action", flat=True))


def test_host_call_entries_are_kept_forever_by_default(fake_clock, settings):
    assert settings.HOST_AUDIT_HOST_CALLS_RETENTION_DAYS is None  # the shipped default
    entry("host.users.list", age_days=3650)
    assert services.audit_host_calls_prune() == (0, False)
    assert actions() == {"host.users.list"}


def test_only_host_call_entries_older_than_the_retention_are_pruned(fake_clock, settings):
    settings.HOST_AUDIT_HOST_CALLS_RETENTION_DAYS = 30
    entry("host.conversations.create", age_days=31)
    entry("host.users.list", age_days=31)
    entry("host.conversations.meta", age_days=29)
    for action in KEPT_FOREVER:
        entry(action, age_days=3650)
    assert services.audit_host_calls_prune() == (2, False)
    assert actions() == {"host.conversations.meta", *KEPT_FOREVER}
    fake_clock.advance(seconds=2 * 86400)
    assert services.audit_host_calls_prune() == (1, False)
    assert actions() == set(KEPT_FOREVER)


def test_the_entry_a_real_host_api_call_writes_is_the_one_pruned(install, fake_clock, settings):
    from extensions_host.runtime import detached_context
    from tests.contributions.exts import make_host_ext

    settings.HOST_AUDIT_HOST_CALLS_RETENTION_DAYS = 1
    install(make_host_ext("bridge", grants={"host"}))
    ctx = detached_context(extension_id="bridge", hook="test")
    assert ctx is not None
    ctx.host.users.list()  # a read: audited all the same (spec 05)
    [call] = AuditEntry.objects.filter(actor="ext:bridge")
    fake_clock.advance(seconds=86400)  # stamped on the host clock, as the prune reads it
    assert services.audit_host_calls_prune() == (0, False)
    fake_clock.advance(ms=1)
    assert services.audit_host_calls_prune() == (1, False)
    assert not AuditEntry.objects.filter(pk=call.pk).exists()


def test_host_call_entries_are_pruned_one_page_oldest_first(fake_clock, settings):
    settings.HOST_AUDIT_HOST_CALLS_RETENTION_DAYS = 1
    for n in range(5):
        entry(f"host.call{n}", age_days=10 - n)
    assert services.audit_host_calls_prune(limit=2) == (2, True)
    assert actions() == {"host.call2", "host.call3", "host.call4"}


def test_the_audit_task_re_enqueues_itself_while_pages_are_full(
    fake_clock, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.HOST_AUDIT_HOST_CALLS_RETENTION_DAYS = 1
    for n in range(5):
        entry(f"host.call{n}", age_days=2)
    entry("extension_stopped", age_days=2)
    monkeypatch.setattr(
        services, "audit_host_calls_prune", partial(services.audit_host_calls_prune, limit=2)
    )
    enqueued: list[int] = []
    monkeypatch.setattr(tasks.prune_audit_host_calls, "delay", lambda: enqueued.append(1))
    calls = 0
    while True:
        calls += 1
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            tasks.prune_audit_host_calls()
        if not callbacks:
            break
    assert actions() == {"extension_stopped"}
    assert (calls, len(enqueued)) == (3, 2)
