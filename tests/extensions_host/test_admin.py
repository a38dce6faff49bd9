"""The staff console: resume with confirmation, admission, purge of uninstalled data."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin import helpers

from core.errors import HostError
from core.models import AuditEntry
from extensions_host.models import ExtensionRecord, ExtensionStatus, RosterEntry
from extensions_host.runtime import run_frame
from extensions_host.services.quotas import (
    MSG_QUOTA_NOT_COUNT,
    MSG_QUOTA_UNKNOWN,
    MSG_QUOTAS_NOT_OBJECT,
)
from extensions_host.services.roster import extension_purge

from .conftest import fire_timer, roster
from .exts import ALL_GRANTS, Item, make_ext

CHANGELIST = "/admin/extensions_host/rosterentry/"


def failing(ctx: Any, timer: Any) -> None:
    raise RuntimeError("boom")


@pytest.fixture
def console(client, staff):
    client.force_login(staff)
    return client


def action(console: Any, name: str, ids: list[str], *, confirm: bool) -> Any:
    data = {"action": name, helpers.ACTION_CHECKBOX_NAME: ids}
    if confirm:
        data["confirm"] = "yes"
    return console.post(CHANGELIST, data)


def test_the_roster_list_and_detail_pages_render(install, console):
    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")

    listing = console.get(CHANGELIST)
    detail = console.get(f"{CHANGELIST}alpha/change/")

    assert listing.status_code == 200 and b"stopped" in listing.content
    assert detail.status_code == 200 and b"on_timer defect: boom" in detail.content


def test_resume_asks_for_confirmation_then_resumes_and_audits(install, console):
    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")

    page = action(console, "resume_selected", ["alpha"], confirm=False)
    assert page.status_code == 200
    assert b"Yes, resume" in page.content
    assert roster("alpha").status == ExtensionStatus.STOPPED

    action(console, "resume_selected", ["alpha"], confirm=True)
    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert AuditEntry.objects.filter(action="extension_resumed", actor="staff").exists()


def test_admitting_requested_grants_from_the_admin(install, console, settings):
    settings.HOST_AUTO_ADMIT = False
    install(make_ext("alpha", grants={"state", "timers"}))

    action(console, "admit_requested_grants", ["alpha"], confirm=True)

    assert roster("alpha").admitted_grants == ["state", "timers"]


def test_purge_deletes_only_an_uninstalled_extensions_data(install, console):
    install(make_ext("alpha"), make_ext("beta"))
    for ext in ("alpha", "beta"):
        assert run_frame(
            extension_id=ext, hook="test", call=lambda c: c.collection("item").put(Item(key="k"))
        ).ok
    install(make_ext("beta"))  # alpha is uninstalled now

    action(console, "purge_uninstalled", ["alpha", "beta"], confirm=True)

    assert not RosterEntry.objects.filter(pk="alpha").exists()
    assert list(ExtensionRecord.objects.values_list("extension_id", flat=True)) == ["beta"]
    audit = AuditEntry.objects.get(action="extension_purged")
    assert (audit.detail["records"], audit.detail["documents"]) == (1, 0)
    assert {"timers", "settled_cursor", "lifecycle_deliveries"} <= set(audit.detail)


@pytest.mark.parametrize("state", ["running", "stopped"])
def test_purging_an_installed_extension_is_refused_by_the_service_and_deletes_nothing(
    install, state
):
    # the console only offers uninstalled rows: the service must refuse any other caller itself
    install(make_ext("alpha", on_timer=failing))
    assert run_frame(
        extension_id="alpha", hook="test", call=lambda c: c.collection("item").put(Item(key="k"))
    ).ok
    if state == "stopped":
        fire_timer("alpha")
    assert roster("alpha").status == state

    with pytest.raises(HostError) as refused:
        extension_purge(extension_id="alpha", actor="staff")

    assert (refused.value.category, refused.value.cause, refused.value.message) == (
        "contract",
        "conflict",
        "Only an uninstalled extension's data can be purged",
    )
    assert roster("alpha").status == state
    assert list(ExtensionRecord.objects.values_list("extension_id", "key")) == [("alpha", "k")]
    assert not AuditEntry.objects.filter(action="extension_purged").exists()


# --- per-extension quotas ----------------------------------------------------------------------


def change_form(**changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "admitted_grants": sorted(ALL_GRANTS),
        "auto_resume": "on",
        "deadline_seconds": "",
        "quotas": "{}",
    }
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("posted", "errors"),
    [
        ('["max_records"]', [MSG_QUOTAS_NOT_OBJECT]),
        ('"max_records"', [MSG_QUOTAS_NOT_OBJECT]),
        ("7", [MSG_QUOTAS_NOT_OBJECT]),
        ('{"max_recordz": 5}', [MSG_QUOTA_UNKNOWN.format(name="'max_recordz'")]),
        ('{"max_records": -1}', [MSG_QUOTA_NOT_COUNT.format(name="max_records")]),
        ('{"max_records": "5"}', [MSG_QUOTA_NOT_COUNT.format(name="max_records")]),
        ('{"max_bytes": 1.5}', [MSG_QUOTA_NOT_COUNT.format(name="max_bytes")]),
        ('{"max_timers": true}', [MSG_QUOTA_NOT_COUNT.format(name="max_timers")]),
        ('{"max_attention": null}', [MSG_QUOTA_NOT_COUNT.format(name="max_attention")]),
        (
            '{"max_records": [1], "nope": 1}',
            [
                MSG_QUOTA_NOT_COUNT.format(name="max_records"),
                MSG_QUOTA_UNKNOWN.format(name="'nope'"),
            ],
        ),
        ("not json", ["Enter a valid JSON."]),
    ],
)
def test_malformed_quotas_are_refused_per_key_and_nothing_is_saved(
    install, console, posted, errors
):
    install(make_ext("alpha"))
    RosterEntry.objects.filter(pk="alpha").update(quotas={"max_records": 9})

    page = console.post(f"{CHANGELIST}alpha/change/", change_form(quotas=posted, auto_resume=""))

    assert page.status_code == 200
    assert page.context["adminform"].form.errors["quotas"] == errors
    row = roster("alpha")
    assert row.quotas == {"max_records": 9}
    assert row.auto_resume is True  # the other fields of the refused form are not saved either


@pytest.mark.parametrize(
    ("posted", "stored"),
    [
        ('{"max_records": 5, "max_bytes": 0}', {"max_records": 5, "max_bytes": 0}),
        ("{}", {}),
    ],
)
def test_valid_quotas_are_saved(install, console, posted, stored):
    install(make_ext("alpha"))
    RosterEntry.objects.filter(pk="alpha").update(quotas={"max_timers": 9})

    saved = console.post(f"{CHANGELIST}alpha/change/", change_form(quotas=posted))

    assert saved.status_code == 302
    assert roster("alpha").quotas == stored


def test_recovery_and_limit_edits_go_through_the_audited_service(install, console, staff):
    install(make_ext("alpha"))

    saved = console.post(
        f"{CHANGELIST}alpha/change/",
        change_form(auto_resume="", deadline_seconds="20", quotas='{"max_timers": 50}'),
    )

    assert saved.status_code == 302
    row = roster("alpha")
    assert (row.auto_resume, row.deadline_seconds, row.quotas) == (False, 20.0, {"max_timers": 50})
    entry = AuditEntry.objects.get(action="extension_limits_changed", target="alpha")
    assert entry.actor == staff.get_username()
    assert entry.detail == {
        "auto_resume": {"before": True, "after": False},
        "deadline_seconds": {"before": None, "after": 20.0},
        "quotas": {"before": {}, "after": {"max_timers": 50}},
    }

    console.post(f"{CHANGELIST}alpha/change/", change_form(auto_resume="", deadline_seconds="20",
                                                          quotas='{"max_timers": 50}'))  # fmt: skip
    assert AuditEntry.objects.filter(action="extension_limits_changed").count() == 1
