"""Secrets never leave the store in plaintext: not in a real database dump, not on any admin
page, not in a real server's log — after the secret was set and read through an extension route
and a defect tried to carry it into a stop reason (spec 05 stores; spec 08: "0 plaintext values
anywhere").

`tests/contributions/test_stores.py` covers the tables (row by row), the cache, the broker,
captured log records and key rotation, and `tests/contributions/test_admin.py` the secrets admin;
this suite adds the whole-system views: `pg_dump`/`dumpdata`, every registered admin page, and
the output of a gunicorn process that served the requests.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess

import httpx
import pytest
from django.contrib import admin
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import NoReverseMatch, reverse

from extensions_host.contributions.models import ExtensionSecret
from extensions_host.contributions.services import stores
from extensions_host.models import RosterEntry
from tests.security.live import gunicorn

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SECRET = "sk-live-PLAINTEXT-secret-4f9a8b7c6d5e"


def database_dump() -> str:
    """`pg_dump` of the test database on PostgreSQL (when the tool is there), and always
    `dumpdata` of every app (what a backup or a support bundle would hold)."""
    out = io.StringIO()
    call_command("dumpdata", stdout=out)
    dump = out.getvalue()
    if connection.vendor == "postgresql" and shutil.which("pg_dump"):
        s = connection.settings_dict
        env = {**os.environ, "PGPASSWORD": s.get("PASSWORD") or ""}
        done = subprocess.run(
            [
                "pg_dump",
                "-h",
                s.get("HOST") or "127.0.0.1",
                "-p",
                str(s.get("PORT") or 5432),
                "-U",
                s.get("USER") or "postgres",
                s["NAME"],
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "extension_secret" in done.stdout or "extensionsecret" in done.stdout
        dump += done.stdout
    return dump


def admin_pages(client: Client) -> dict[str, str]:
    """Every registered admin changelist and the change page of each of its rows (up to 5)."""
    pages = {"index": client.get("/admin/").content.decode()}
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        try:
            changelist = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        except NoReverseMatch:
            continue
        response = client.get(changelist)
        assert response.status_code in (200, 302, 403), (changelist, response.status_code)
        pages[changelist] = response.content.decode()
        for pk in model_admin.get_queryset(_request(client)).values_list("pk", flat=True)[:5]:
            url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[pk])
            detail = client.get(url)
            assert detail.status_code in (200, 302, 403), (url, detail.status_code)
            pages[url] = detail.content.decode()
    return pages


def _request(client: Client):  # a staff request for ModelAdmin.get_queryset
    from django.contrib.auth import get_user_model
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = get_user_model().objects.get(username="staff")
    return request


def test_a_used_secret_appears_in_no_dump_no_admin_page_and_no_server_log(tmp_path, staff, member):
    from core.services import token_create

    _, raw = token_create(user=member, name="t", scope="write", expires_at=None)
    with gunicorn(tmp_path, HOST_EXTENSIONS="tests.security.exts:vaulted") as server:
        with httpx.Client(base_url=server.url, timeout=20) as http:
            headers = {"Authorization": f"Bearer {raw}", "Content-Type": "text/plain"}
            kept = http.post("/v1/ext/vaulted/keep", content=SECRET, headers=headers)
            assert kept.json() == {"ok": True}, kept.text
            spilled = http.post("/v1/ext/vaulted/spill", headers=headers)
            assert spilled.status_code == 503
            assert SECRET not in spilled.text
        log = server.output()

    row = ExtensionSecret.objects.get(extension_id="vaulted", key="token")
    assert SECRET not in row.ciphertext
    assert stores.decrypt(row.ciphertext) == SECRET  # there, and it round-trips
    assert "[redacted]" in RosterEntry.objects.get(pk="vaulted").reason
    assert "vaulted" in log and SECRET not in log  # the server did log the stop, not the value

    dump = database_dump()
    assert row.ciphertext in dump  # the dump holds the row …
    assert SECRET not in dump  # … as ciphertext only

    client = Client()
    client.force_login(staff)
    pages = admin_pages(client)
    assert len(pages) > 10
    leaking = [url for url, page in pages.items() if SECRET in page]
    assert leaking == []
    roster_page = pages[reverse("admin:extensions_host_rosterentry_change", args=["vaulted"])]
    assert "token" in roster_page  # the key is shown, its value never
