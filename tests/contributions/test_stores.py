"""Stores: secrets encrypted at rest (with rotation) that never leak, settings as validated
JSON, per-extension directories."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection
from kombu.transport import memory

from core.errors import HostError
from core.logging import JsonFormatter
from core.models import AuditEntry
from extensions_host.contributions.models import ExtensionSecret, ExtensionSettings
from extensions_host.contributions.services import stores
from extensions_host.contributions.services.notify import notification_deliver, notification_emit
from extensions_host.models import RosterEntry
from extensions_host.runtime import detached_context
from extensions_host.sdk import Extension, Notifier, Route, StateError

from .exts import make_host_ext

SECRET = "sk-live-PLAINTEXT-4f9a8b7c6d5e"  # shaped like a provider key


def ctx_of(extension_id: str = "vault"):
    ctx = detached_context(extension_id=extension_id, hook="test")
    assert ctx is not None
    return ctx


@pytest.fixture
def vault(install):
    install(make_host_ext("vault", grants={"state"}))
    return ctx_of("vault")


def test_a_secret_is_stored_as_ciphertext_and_reads_back(vault):
    vault.stores.secrets.set("api_key", SECRET)
    row = ExtensionSecret.objects.get(extension_id="vault", key="api_key")
    assert SECRET not in row.ciphertext
    assert row.ciphertext.startswith("gAAAA")  # a Fernet token
    assert stores.decrypt(row.ciphertext) == SECRET
    assert vault.stores.secrets.get("api_key") == SECRET
    assert vault.stores.secrets.get("missing") is None
    assert vault.stores.secrets.keys() == ["api_key"]
    vault.stores.secrets.delete("api_key")
    assert vault.stores.secrets.get("api_key") is None


def test_secret_bounds_are_checked_before_writing(vault):
    with pytest.raises(StateError, match="Secret key must be"):
        vault.stores.secrets.set("../bad key", "x")
    with pytest.raises(StateError, match="Secret value must be"):
        vault.stores.secrets.set("k", "x" * (stores.SECRET_VALUE_MAX + 1))
    assert ExtensionSecret.objects.count() == 0


def test_a_secret_written_inside_a_frame_rolls_back_with_it(vault):
    def write_then_fail(ctx):
        ctx.stores.secrets.set("token", SECRET)
        raise StateError("conflict", "changed my mind")

    with pytest.raises(StateError):
        vault.update(write_then_fail)
    assert not ExtensionSecret.objects.exists()
    vault.update(lambda ctx: ctx.stores.secrets.set("token", SECRET))
    assert vault.stores.secrets.get("token") == SECRET


def _dump_tables() -> str:
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f'SELECT * FROM "{table}"')
            chunks.append(repr(cursor.fetchall()))
    return "\n".join(chunks)


def _dump_cache() -> bytes:
    store = getattr(cache, "_cache", {})
    return b"".join(
        (key.encode() if isinstance(key, str) else bytes(key)) + bytes(value)
        for key, value in store.items()
    )


def _dump_broker() -> str:
    chunks = []
    for queue in memory.Channel.queues.values():
        for message in list(queue.queue):
            chunks.append(repr(message))
            body = message.get("body") if isinstance(message, dict) else None
            if isinstance(body, str):
                try:
                    chunks.append(base64.b64decode(body).decode("utf-8", "replace"))
                except ValueError:
                    chunks.append(body)
    return "\n".join(chunks)


@pytest.mark.django_db(transaction=True)
def test_no_plaintext_secret_in_tables_cache_broker_or_logs_after_use(
    install, api, member, caplog, settings
):
    """Use a secret everywhere it can travel — a route sets and reads it, a notifier uses it, a
    failure message carries it, a stop reason carries it — then look for it everywhere."""
    settings.CELERY_BROKER_URL = "memory://"
    caplog.set_level(logging.DEBUG)
    memory.Channel.queues.clear()

    def store(ctx, request):
        ctx.stores.secrets.set("token", request.body.decode())
        logging.getLogger("test.route").info("stored the token")
        return {"ok": ctx.stores.secrets.get("token") == request.body.decode()}

    def leak(ctx, request):
        raise RuntimeError(f"upstream refused token {ctx.stores.secrets.get('token')}")

    def push(ctx, event):
        raise ConnectionError(f"push with {ctx.stores.secrets.get('token')} failed")

    ext = Extension(
        id="leaky",
        version="1",
        grants={"routes", "notify"},
        routes=[Route("POST", "store", store), Route("POST", "leak", leak)],
        notifiers=[Notifier("push", push)],
    )
    install(ext)
    client = api(member)
    assert client.post("/v1/ext/leaky/store", SECRET, content_type="text/plain").json() == {
        "ok": True
    }
    from django.db import transaction

    with transaction.atomic():
        notification = notification_emit(type="run.settled", user="member", title="Answered")
    for delivery in notification.deliveries.all():
        notification_deliver(delivery_id=delivery.pk)  # fails: the message carries the secret
    assert client.post("/v1/ext/leaky/leak").status_code == 503  # stop: reason carries it
    row = RosterEntry.objects.get(pk="leaky")
    assert row.reason == "route POST leak defect: upstream refused token [redacted]"
    cache.set("probe", "cache works")  # the cache is in use; the secret is never in it

    assert SECRET not in _dump_tables()
    assert SECRET.encode() not in _dump_cache()
    broker = _dump_broker()
    assert "notifier_deliver" in broker  # the broker did carry our task …
    assert SECRET not in broker  # … with ids only
    formatter = JsonFormatter()
    logged = "\n".join(formatter.format(record) for record in caplog.records)
    assert "extension_stopped" in logged
    assert SECRET not in logged
    assert SECRET not in caplog.text


def test_after_rotating_the_key_secrets_still_read_and_reencryption_moves_every_row(
    vault, settings
):
    settings.HOST_SECRET_KEY = "first-key"
    settings.HOST_SECRET_KEYS_OLD = []
    vault.stores.secrets.set("a", "alpha-secret")
    vault.stores.secrets.set("b", "beta-secret")
    _, first_id, _ = stores.keyring()
    settings.HOST_SECRET_KEY = "second-key"
    settings.HOST_SECRET_KEYS_OLD = ["first-key"]
    _, second_id, old_ids = stores.keyring()
    assert old_ids == (first_id,)
    assert set(ExtensionSecret.objects.values_list("key_id", flat=True)) == {first_id}
    assert vault.stores.secrets.get("a") == "alpha-secret"  # the old key still decrypts
    vault.stores.secrets.set("c", "gamma-secret")  # new writes use the new key
    call_command("secrets_reencrypt")
    assert set(ExtensionSecret.objects.values_list("key_id", flat=True)) == {second_id}
    only_new = Fernet(stores._derive("second-key"))
    for row in ExtensionSecret.objects.all():
        only_new.decrypt(row.ciphertext.encode())  # no row is left under the old key
    settings.HOST_SECRET_KEYS_OLD = []  # the old key can now be dropped
    assert vault.stores.secrets.get("b") == "beta-secret"


def test_a_secret_under_a_lost_key_is_unavailable_not_a_crash(vault, settings, caplog):
    settings.HOST_SECRET_KEY = "lost-key"
    vault.stores.secrets.set("a", "alpha")
    _, lost_id, _ = stores.keyring()
    settings.HOST_SECRET_KEY = "other-key"
    with pytest.raises(StateError, match="cannot be decrypted"):
        vault.stores.secrets.get("a")
    # the log names what the operator must put back, and never the value
    (line,) = [r for r in caplog.records if r.getMessage() == "secret_unreadable"]
    assert (line.levelname, line.extension_id, line.key, line.key_id) == (
        "ERROR",
        vault.extension_id,
        "a",
        lost_id,
    )
    assert "HOST_SECRET_KEYS_OLD" in line.fix
    assert "alpha" not in caplog.text
    with pytest.raises(Exception, match="cannot be decrypted"):
        call_command("secrets_reencrypt")


def test_settings_read_as_empty_and_store_validated_json(vault):
    assert vault.stores.settings.get() == {}
    vault.stores.settings.set({"channel": "#general", "limit": 3})
    assert vault.stores.settings.get() == {"channel": "#general", "limit": 3}
    with pytest.raises(StateError, match="settings are invalid"):
        vault.stores.settings.set(["not", "an", "object"])
    with pytest.raises(StateError, match="settings are invalid"):
        vault.stores.settings.set({"x": float("nan")})
    assert vault.stores.settings.get() == {"channel": "#general", "limit": 3}


def test_paths_are_per_extension_directories_under_the_data_dir(vault, settings, tmp_path):
    settings.HOST_DATA_DIR = tmp_path
    paths = vault.stores.paths
    assert Path(paths.data) == tmp_path / "data" / "vault"
    assert Path(paths.cache) == tmp_path / "cache" / "vault"
    assert Path(paths.state) == tmp_path / "state" / "vault"
    assert all(Path(p).is_dir() for p in (paths.data, paths.cache, paths.state))


def test_a_secret_value_with_a_nul_is_refused_before_writing(vault):
    with pytest.raises(StateError, match="Secret value must be"):
        vault.stores.secrets.set("k", "before\x00after")
    assert not ExtensionSecret.objects.exists()


def test_a_secret_of_an_extension_not_in_the_roster_is_refused_as_unavailable(vault):
    with pytest.raises(StateError, match="not in the roster") as refused:
        stores.secret_set(extension_id="ghost", key="k", value=SECRET)
    assert refused.value.kind == "unavailable"
    assert not ExtensionSecret.objects.filter(extension_id="ghost").exists()


def test_reencryption_moves_only_rows_under_an_old_key_and_a_second_run_moves_none(vault, settings):
    settings.HOST_SECRET_KEY = "first-key"
    settings.HOST_SECRET_KEYS_OLD = []
    vault.stores.secrets.set("a", "alpha-secret")
    vault.stores.secrets.set("b", "beta-secret")
    settings.HOST_SECRET_KEY = "second-key"
    settings.HOST_SECRET_KEYS_OLD = ["first-key"]
    vault.stores.secrets.set("c", "gamma-secret")  # already under the current key
    current = ExtensionSecret.objects.get(key="c").ciphertext
    assert stores.secrets_reencrypt() == {"reencrypted": 2, "unreadable": 0}
    assert ExtensionSecret.objects.get(key="c").ciphertext == current  # left as it was
    assert stores.secrets_reencrypt() == {"reencrypted": 0, "unreadable": 0}
    assert {k: vault.stores.secrets.get(k) for k in "abc"} == {
        "a": "alpha-secret",
        "b": "beta-secret",
        "c": "gamma-secret",
    }


def test_staff_deleting_a_secret_that_does_not_exist_records_no_audit_entry(vault):
    stores.secret_edit(extension_id="vault", key="never_set", value=None, actor="staff")
    assert not AuditEntry.objects.filter(action__startswith="extension_secret_").exists()
    stores.secret_edit(extension_id="vault", key="k", value=SECRET, actor="staff")
    stores.secret_edit(extension_id="vault", key="k", value=None, actor="staff")
    assert list(
        AuditEntry.objects.filter(action__startswith="extension_secret_")
        .order_by("pk")
        .values_list("action", flat=True)
    ) == ["extension_secret_set", "extension_secret_deleted"]


def test_another_extensions_frame_can_neither_read_nor_write_its_secrets(vault, install):
    vault.stores.secrets.set("api_key", SECRET)
    install(make_host_ext("reader", grants={"state"}), make_host_ext("writer", grants={"state"}))
    stolen: list[str | None] = []
    with pytest.raises(BaseException, match="another extension's context"):
        ctx_of("reader").update(lambda ctx: stolen.append(vault.stores.secrets.get("api_key")))
    assert stolen == []
    with pytest.raises(BaseException, match="another extension's context"):
        ctx_of("writer").update(lambda ctx: vault.stores.secrets.set("api_key", "overwritten"))
    assert vault.stores.secrets.get("api_key") == SECRET


def test_settings_of_an_extension_not_in_the_roster_are_refused_as_not_found(vault):
    with pytest.raises(HostError, match="not in the roster") as refused:
        stores.settings_store(extension_id="ghost", value={"channel": "#general"})
    assert refused.value.status == 404
    assert not ExtensionSettings.objects.filter(pk="ghost").exists()
