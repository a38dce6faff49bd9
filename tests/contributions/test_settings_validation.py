"""Settings are checked with the host's JSON-input rule (`core.validation.model_from_json`:
strict JSON types, unknown keys refused) whichever door they come through (the admin, the
staff service, the extension's own `ctx.stores.settings.set`), and stored as given once valid:
the model reads them back as what was typed (a model's dump would not: a `SecretStr` dumps as
its mask), and the stored value saves again unchanged."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from pydantic import BaseModel, Field, SecretStr

from core.errors import HostError
from extensions_host.contributions.models import ExtensionSettings
from extensions_host.contributions.services.stores import MSG_SETTINGS_INVALID, settings_edit
from extensions_host.runtime import detached_context
from extensions_host.sdk import Extension, StateError


class Window(BaseModel):
    start: datetime
    minutes: int = 30


class TeamSettings(BaseModel):
    team: str = Field(default="the team", max_length=80)
    max_blockers: int = Field(default=5, ge=0)
    quiet: Window | None = None
    webhook_token: SecretStr | None = None


@pytest.fixture
def team(install):
    install(Extension(id="team", version="1", settings_model=TeamSettings))


def stored() -> dict:
    return ExtensionSettings.objects.get(pk="team").value


def test_a_string_for_an_integer_and_an_unknown_key_are_refused_with_details_by_field(team):
    with pytest.raises(HostError) as error:
        settings_edit(
            extension_id="team", value={"max_blockers": "3", "typo_key": True}, actor="staff"
        )
    assert error.value.status == 400
    assert error.value.message == MSG_SETTINGS_INVALID
    assert error.value.details == {
        "max_blockers": ["Input should be a valid integer"],
        "typo_key": ["Extra inputs are not permitted"],
    }
    with pytest.raises(HostError) as nested:
        settings_edit(
            extension_id="team",
            value={"quiet": {"start": "2026-01-01T09:00:00Z", "extra": 1}},
            actor="staff",
        )
    assert nested.value.details == {"quiet.extra": ["Extra inputs are not permitted"]}
    assert not ExtensionSettings.objects.exists()


def test_valid_settings_are_stored_as_given_and_read_back_as_typed(team):
    typed = {
        "max_blockers": 3,
        "quiet": {"start": "2026-01-01T09:00:00+00:00"},
        "webhook_token": "wh-typed-by-staff",
    }
    assert settings_edit(extension_id="team", value=typed, actor="staff") == typed
    assert stored() == typed
    read = TeamSettings.model_validate_json(json.dumps(stored()), strict=True)
    assert read.webhook_token.get_secret_value() == "wh-typed-by-staff"  # not its mask
    assert (read.team, read.quiet.minutes) == ("the team", 30)  # defaults when read
    # what is stored (and shown in the admin) saves again unchanged
    assert settings_edit(extension_id="team", value=stored(), actor="staff") == typed


def test_the_extension_setting_its_own_settings_goes_through_the_same_rule(team):
    ctx = detached_context(extension_id="team", hook="test")
    assert ctx is not None
    # the message names what to fix, as the staff form's details do by field
    with pytest.raises(StateError) as refused:
        ctx.stores.settings.set({"max_blockers": "3"})
    assert refused.value.message == (
        "Extension settings are invalid: max_blockers: Input should be a valid integer"
    )
    with pytest.raises(StateError) as refused:
        ctx.stores.settings.set({"typo_key": 1, "max_blockers": -1})
    assert refused.value.message.startswith("Extension settings are invalid: ")
    assert refused.value.message.endswith(" (and 1 more)")
    assert "typo_key: Extra inputs are not permitted" in refused.value.message or (
        "max_blockers: Input should be greater than or equal to 0" in refused.value.message
    )
    assert ctx.stores.settings.get() == {}
    ctx.stores.settings.set({"team": "ops"})
    assert ctx.stores.settings.get() == {"team": "ops"}


def test_the_settings_admin_shows_the_same_errors_and_stores_the_validated_value(
    team, client, staff
):
    client.force_login(staff)
    url = "/admin/ext_contributions/extensionsettings/add/"
    refused = client.post(
        url, {"extension": "team", "value": '{"max_blockers": "3", "typo_key": true}'}
    )
    assert refused.status_code == 200
    page = refused.content.decode()
    assert "max_blockers: Input should be a valid integer" in page
    assert "typo_key: Extra inputs are not permitted" in page
    assert not ExtensionSettings.objects.exists()
    saved = client.post(url, {"extension": "team", "value": '{"max_blockers": 3}'})
    assert saved.status_code == 302
    assert stored() == {"max_blockers": 3}
