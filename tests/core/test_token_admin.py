"""The staff side of API tokens in the admin: listed by prefix, created for a user (the raw
token shown once), revoked (audited, idempotent); never edited, deleted or shown by digest."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.admin import helpers
from django.test import Client
from django.urls import reverse

from core import clock
from core.auth import token_digest
from core.models import ApiToken, AuditEntry
from core.services import MSG_EXPIRY_NOT_FUTURE, token_create

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:core_apitoken_changelist")
ADD = reverse("admin:core_apitoken_add")


@pytest.fixture
def console(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client


def test_the_list_shows_each_tokens_prefix_never_its_digest(console, owner):
    token, raw = token_create(user=owner, name="laptop", scope="read", expires_at=None)
    page = console.get(CHANGELIST).content.decode()
    assert token.prefix in page and "laptop" in page and "owner" in page
    assert token.digest not in page and raw not in page
    # searching by the digest finds nothing: it is not a search field
    found = console.get(CHANGELIST, {"q": token.digest}).content.decode()
    assert "0 results" in found and token.prefix not in found.split("0 results")[1]


def test_staff_create_a_token_for_a_user_and_see_the_raw_token_once(console, owner):
    response = console.post(
        ADD,
        {"user": owner.pk, "name": "ci", "scope": "read", "expires_at_0": "", "expires_at_1": ""},
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    token = ApiToken.objects.get(user=owner, name="ci")
    raw = re.search(r'<code class="hy-token">([^<]+)</code>', response.content.decode()).group(1)
    assert raw.startswith(token.prefix)
    assert token.digest == token_digest(raw)
    assert f'href="{CHANGELIST}"' in response.content.decode()  # the way back to the list
    assert token.scope == "read" and token.expires_at is None
    entry = AuditEntry.objects.get(action="token_created")
    assert (entry.actor, entry.target) == ("staff", f"owner:{token.prefix}")
    # never again: the list and the token's page hold only the prefix
    for url in (CHANGELIST, reverse("admin:core_apitoken_change", args=[token.pk])):
        assert raw not in console.get(url).content.decode()


def test_an_expiry_in_the_past_is_a_form_error_and_creates_nothing(console, owner, fake_clock):
    past = clock.now() - dt.timedelta(minutes=1)
    response = console.post(
        ADD,
        {
            "user": owner.pk,
            "name": "old",
            "scope": "write",
            "expires_at_0": past.strftime("%Y-%m-%d"),
            "expires_at_1": past.strftime("%H:%M:%S"),
        },
    )
    assert response.status_code == 200
    assert MSG_EXPIRY_NOT_FUTURE in response.content.decode()
    assert not ApiToken.objects.exists()
    assert not AuditEntry.objects.exists()


def test_an_unknown_user_or_scope_is_a_form_error_and_creates_nothing(console, owner):
    response = console.post(ADD, {"user": 99999, "name": "x", "scope": "root"})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors.keys() == {"user", "scope"}
    assert not ApiToken.objects.exists()


def test_the_revoke_action_revokes_once_and_audits_once(console, owner, member):
    mine, _ = token_create(user=owner, name="a", scope="write", expires_at=None)
    theirs, _ = token_create(user=member, name="b", scope="read", expires_at=None)
    kept, _ = token_create(user=member, name="c", scope="read", expires_at=None)

    def revoke(*tokens: ApiToken):
        data = {"action": "revoke_selected", helpers.ACTION_CHECKBOX_NAME: [t.pk for t in tokens]}
        return console.post(CHANGELIST, data, follow=True)

    assert "Revoked 2 token(s)." in revoke(mine, theirs).content.decode()
    assert ApiToken.objects.filter(revoked_at__isnull=False).count() == 2
    kept.refresh_from_db()
    assert kept.revoked_at is None
    entries = AuditEntry.objects.filter(action="token_revoked")
    assert sorted(e.target for e in entries) == [f"member:{theirs.prefix}", f"owner:{mine.prefix}"]
    assert {e.actor for e in entries} == {"staff"}
    first = ApiToken.objects.get(pk=mine.pk).revoked_at
    # again: nothing changes, nothing more is audited
    assert "Revoked 0 token(s)." in revoke(mine, theirs).content.decode()
    assert ApiToken.objects.get(pk=mine.pk).revoked_at == first
    assert entries.count() == 2


def test_the_change_page_is_read_only_and_never_shows_the_digest(console, owner):
    token, _ = token_create(user=owner, name="laptop", scope="read", expires_at=None)
    url = reverse("admin:core_apitoken_change", args=[token.pk])
    page = console.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert token.prefix in html and token.digest not in html
    assert 'name="name"' not in html  # no input: nothing to edit
    assert console.post(url, {"name": "renamed", "scope": "runtime"}).status_code == 403
    token.refresh_from_db()
    assert (token.name, token.scope) == ("laptop", "read")
    delete = console.post(reverse("admin:core_apitoken_delete", args=[token.pk]), {"post": "yes"})
    assert delete.status_code == 403
    assert ApiToken.objects.filter(pk=token.pk).exists()


def test_a_non_staff_user_cannot_reach_the_token_admin(owner, member):
    token, _ = token_create(user=member, name="x", scope="read", expires_at=None)
    client = Client()
    client.force_login(owner)
    for url in (CHANGELIST, ADD, reverse("admin:core_apitoken_change", args=[token.pk])):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"], url
    response = client.post(
        CHANGELIST, {"action": "revoke_selected", helpers.ACTION_CHECKBOX_NAME: [token.pk]}
    )
    assert response.status_code == 302
    response = client.post(ADD, {"user": owner.pk, "name": "sneaky", "scope": "write"})
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is None
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["x"]


def test_staff_without_token_permissions_can_neither_create_nor_revoke(make_user, member):
    token, _ = token_create(user=member, name="x", scope="read", expires_at=None)
    client = Client()
    client.force_login(make_user("helpdesk", is_staff=True))
    assert client.get(CHANGELIST).status_code == 403
    assert client.get(ADD).status_code == 403
    response = client.post(
        CHANGELIST, {"action": "revoke_selected", helpers.ACTION_CHECKBOX_NAME: [token.pk]}
    )
    assert response.status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None
