"""Staff set, replace and delete an extension's secrets in the admin: the value is write-only
(never rendered back, not even after an error), goes through the stores service that encrypts
it (the extension reads it), and is audited by key only; without the model's permissions
nothing is written."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission

from core.models import AuditEntry
from extensions_host.contributions.models import ExtensionSecret
from extensions_host.contributions.services.stores import (
    MSG_SECRET_KEY,
    MSG_SECRET_VALUE,
    SECRET_VALUE_MAX,
    decrypt,
    keyring,
)
from extensions_host.runtime import detached_context
from extensions_host.sdk import Extension

SECRET = "xoxb-typed-by-staff-5d1c9e7a"
REPLACED = "xoxb-replaced-by-staff-0b2f4c6d"
ADD = "/admin/ext_contributions/extensionsecret/add/"
LIST = "/admin/ext_contributions/extensionsecret/"


@pytest.fixture
def bridge(install):
    install(Extension(id="bridge", version="1"))


def read_secret(key: str) -> str | None:
    ctx = detached_context(extension_id="bridge", hook="test")
    assert ctx is not None
    return ctx.stores.secrets.get(key)


def pages(client, row: ExtensionSecret) -> list[str]:
    urls = [
        LIST,
        ADD,
        f"{LIST}{row.pk}/change/",
        f"{LIST}{row.pk}/history/",
        f"{LIST}{row.pk}/delete/",
        "/admin/extensions_host/rosterentry/bridge/change/",
        "/admin/core/auditentry/",
        "/admin/",
    ]
    found = []
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        found.append(response.content.decode())
    return found


def test_staff_set_a_secret_in_the_admin_and_the_extension_reads_it(bridge, client, staff):
    client.force_login(staff)
    form = client.get(ADD).content.decode()
    assert 'type="password"' in form

    saved = client.post(ADD, {"extension": "bridge", "key": "slack_token", "value": SECRET})

    assert saved.status_code == 302
    row = ExtensionSecret.objects.get(extension_id="bridge", key="slack_token")
    assert SECRET not in row.ciphertext
    assert decrypt(row.ciphertext) == SECRET
    assert row.key_id == keyring()[1]  # under the current key, as `ctx.stores.secrets.set`
    assert read_secret("slack_token") == SECRET
    for html in pages(client, row):
        assert SECRET not in html
        assert row.ciphertext not in html
    (audit,) = AuditEntry.objects.filter(action="extension_secret_set")
    assert (audit.actor, audit.target) == ("staff", "bridge")
    assert audit.detail == {"key": "slack_token", "replaced": False}
    for entry in LogEntry.objects.all():
        assert SECRET not in f"{entry.object_repr} {entry.change_message}"


def test_staff_replace_then_delete_a_secret_audited_by_key_only(bridge, client, staff):
    client.force_login(staff)
    client.post(ADD, {"extension": "bridge", "key": "slack_token", "value": SECRET})
    row = ExtensionSecret.objects.get()
    change = f"{LIST}{row.pk}/change/"
    page = client.get(change).content.decode()
    assert "set" in page
    assert SECRET not in page

    assert client.post(change, {"value": REPLACED}).status_code == 302
    assert read_secret("slack_token") == REPLACED
    assert ExtensionSecret.objects.get().pk == row.pk

    assert client.post(f"{LIST}{row.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not ExtensionSecret.objects.exists()
    assert read_secret("slack_token") is None
    audit = list(
        AuditEntry.objects.filter(action__startswith="extension_secret_")
        .order_by("pk")
        .values_list("action", "detail")
    )
    assert audit == [
        ("extension_secret_set", {"key": "slack_token", "replaced": False}),
        ("extension_secret_set", {"key": "slack_token", "replaced": True}),
        ("extension_secret_deleted", {"key": "slack_token"}),
    ]
    rendered = str(list(AuditEntry.objects.values_list("detail", flat=True)))
    assert SECRET not in rendered
    assert REPLACED not in rendered


def test_the_service_bounds_are_shown_on_the_form_and_the_value_is_not_rendered_back(
    bridge, client, staff
):
    client.force_login(staff)
    bad_key = client.post(ADD, {"extension": "bridge", "key": "not a key!", "value": SECRET})
    assert bad_key.status_code == 200
    assert MSG_SECRET_KEY in bad_key.content.decode()
    assert SECRET not in bad_key.content.decode()
    too_long = "x" * (SECRET_VALUE_MAX + 1)
    big = client.post(ADD, {"extension": "bridge", "key": "ok", "value": too_long})
    assert big.status_code == 200
    assert MSG_SECRET_VALUE in big.content.decode()
    assert not ExtensionSecret.objects.exists()
    assert not AuditEntry.objects.filter(action__startswith="extension_secret_").exists()


def test_without_the_permissions_nobody_sets_replaces_or_deletes_a_secret(
    bridge, client, make_user, staff
):
    client.force_login(staff)
    client.post(ADD, {"extension": "bridge", "key": "slack_token", "value": SECRET})
    row = ExtensionSecret.objects.get()
    change = f"{LIST}{row.pk}/change/"
    delete = f"{LIST}{row.pk}/delete/"
    other = {"extension": "bridge", "key": "other", "value": "v-1234"}

    member = make_user("member")  # not staff: the admin sends them to log in
    client.force_login(member)
    assert client.post(ADD, other).status_code == 302
    assert client.post(change, {"value": REPLACED}).status_code == 302

    viewer = make_user("viewer", is_staff=True)  # staff, may only view secrets
    viewer.user_permissions.add(Permission.objects.get(codename="view_extensionsecret"))
    client.force_login(viewer)
    assert client.get(ADD).status_code == 403
    assert client.post(ADD, other).status_code == 403
    page = client.get(change)
    assert page.status_code == 200
    assert 'type="password"' not in page.content.decode()
    client.post(change, {"value": REPLACED})
    assert client.post(delete, {"post": "yes"}).status_code == 403

    assert list(ExtensionSecret.objects.values_list("key", flat=True)) == ["slack_token"]
    assert read_secret("slack_token") == SECRET
    assert AuditEntry.objects.filter(action__startswith="extension_secret_").count() == 1


def test_an_error_while_saving_keeps_the_value_out_of_the_error_report(
    bridge, client, staff, monkeypatch
):
    # what Django's debug page or AdminEmailHandler would show of a 500 in the admin's save:
    # the POST body (sensitive_post_parameters) and every frame of the host's code from the
    # view down to the encryption (sensitive_variables); the test client's own frames aside
    from django.test import RequestFactory
    from django.views.debug import ExceptionReporter

    from extensions_host.contributions.services import stores

    def broken(value: str) -> tuple[str, str]:
        raise RuntimeError("the key store is down")

    monkeypatch.setattr(stores.MultiFernet, "encrypt", lambda self, data: broken(data))
    client.force_login(staff)
    with pytest.raises(RuntimeError) as raised:
        client.post(ADD, {"extension": "bridge", "key": "slack_token", "value": SECRET})
    error = raised.value
    request = RequestFactory().post(ADD, {"value": SECRET})
    request.sensitive_post_parameters = ["value"]
    reporter = ExceptionReporter(request, type(error), error, error.__traceback__)
    host_frames = [
        frame
        for frame in reporter.get_traceback_frames()
        if "/django/test/" not in frame["filename"] and "/tests/" not in frame["filename"]
    ]
    assert any(frame["function"] == "secret_set" for frame in host_frames)
    for frame in host_frames:
        assert SECRET not in repr(frame["vars"]), frame["function"]
    assert SECRET not in repr(reporter.filter.get_post_parameters(request))
    assert not ExtensionSecret.objects.exists()
