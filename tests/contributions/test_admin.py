"""Admin: secrets show keys only, settings are validated JSON, the audit log is read-only."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, Field

from core.models import AuditEntry
from core.services import audit_record
from extensions_host.contributions.models import ExtensionSecret, ExtensionSettings
from extensions_host.contributions.services.stores import secret_set
from extensions_host.sdk import Extension

SECRET = "xoxb-plaintext-secret-value-77"


class BridgeSettings(BaseModel):
    channel: str = Field(min_length=1)
    limit: int = Field(default=10, ge=1, le=100)


@pytest.fixture
def bridge(install):
    install(Extension(id="bridge", version="1", settings_model=BridgeSettings))


@pytest.fixture
def staff_client(client, staff):
    client.force_login(staff)
    return client


def test_the_secrets_admin_shows_keys_and_set_never_the_value(bridge, staff_client):
    secret_set(extension_id="bridge", key="slack_token", value=SECRET)
    row = ExtensionSecret.objects.get()
    listing = staff_client.get("/admin/ext_contributions/extensionsecret/")
    assert listing.status_code == 200
    page = listing.content.decode()
    assert "slack_token" in page
    assert "current key" in page
    assert SECRET not in page
    assert row.ciphertext not in page
    detail = staff_client.get(f"/admin/ext_contributions/extensionsecret/{row.pk}/change/")
    assert detail.status_code == 200
    assert SECRET not in detail.content.decode()
    assert row.ciphertext not in detail.content.decode()
    # staff may add one (write-only value: tests/contributions/test_admin_secrets.py)
    assert staff_client.get("/admin/ext_contributions/extensionsecret/add/").status_code == 200


def test_settings_are_edited_as_validated_json_and_audited(bridge, staff_client):
    url = "/admin/ext_contributions/extensionsettings/add/"
    invalid = staff_client.post(url, {"extension": "bridge", "value": '{"channel": ""}'})
    assert invalid.status_code == 200
    assert "channel" in invalid.content.decode()
    assert not ExtensionSettings.objects.exists()
    broken = staff_client.post(url, {"extension": "bridge", "value": "{not json"})
    assert "Not valid JSON" in broken.content.decode()
    saved = staff_client.post(url, {"extension": "bridge", "value": '{"channel": "#ops"}'})
    assert saved.status_code == 302
    assert ExtensionSettings.objects.get(pk="bridge").value == {"channel": "#ops"}
    change = "/admin/ext_contributions/extensionsettings/bridge/change/"
    edited = staff_client.post(change, {"value": json.dumps({"channel": "#ops", "limit": 500})})
    assert edited.status_code == 200  # refused: limit over 100
    assert ExtensionSettings.objects.get(pk="bridge").value == {"channel": "#ops"}
    staff_client.post(change, {"value": json.dumps({"channel": "#ops", "limit": 50})})
    assert ExtensionSettings.objects.get(pk="bridge").value == {"channel": "#ops", "limit": 50}
    audit = AuditEntry.objects.filter(action="extension_settings_edited", actor="staff")
    assert audit.count() == 2
    assert audit.first().detail == {"keys_before": ["channel"], "keys_after": ["channel", "limit"]}


def test_the_audit_log_is_visible_and_read_only(db, staff_client):
    audit_record(actor="staff", action="extension_resumed", target="alpha")
    entry = AuditEntry.objects.get()
    listing = staff_client.get("/admin/core/auditentry/")
    assert listing.status_code == 200
    assert "extension_resumed" in listing.content.decode()
    assert staff_client.get("/admin/core/auditentry/add/").status_code == 403
    assert staff_client.get(f"/admin/core/auditentry/{entry.pk}/delete/").status_code == 403
    staff_client.post(f"/admin/core/auditentry/{entry.pk}/change/", {"actor": "someone"})
    assert AuditEntry.objects.get().actor == "staff"
