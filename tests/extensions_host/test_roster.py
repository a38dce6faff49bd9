"""The roster: sync, admission, restart, uninstall, resume and auto-resume (spec 02 §2, §3,
§7)."""

from __future__ import annotations

import datetime as dt
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from core.models import AuditEntry
from extensions_host import registry
from extensions_host.models import DocumentDeclaration, ExtensionRecord, ExtensionStatus
from extensions_host.runtime import forget_activations, run_frame
from extensions_host.services.roster import (
    extension_admit_grants,
    extension_resume,
    roster_auto_resume_due,
)

from .conftest import fire_timer, roster
from .exts import make_ext, put_item


def failing(ctx: Any, timer: Any) -> None:
    raise RuntimeError("boom")


def test_sync_installs_new_extensions_running_with_their_grants_admitted(install):
    install(make_ext("alpha", grants={"state", "timers"}))

    row = roster("alpha")
    loaded = registry.get("alpha")
    assert row.status == ExtensionStatus.RUNNING
    assert (row.version, row.revision, row.fingerprint) == (
        "1.0.0",
        loaded.revision,
        loaded.fingerprint,
    )
    assert row.requested_grants == row.admitted_grants == ["state", "timers"]
    assert row.state_version == 1
    assert list(DocumentDeclaration.objects.values_list("name", "max_bytes", "fork")) == [
        ("pad", 256, "copy")
    ]
    service_user = get_user_model().objects.get(username="ext:alpha")
    assert not service_user.has_usable_password()


def test_without_auto_admit_grants_wait_for_staff_and_gate_hooks(install, settings):
    settings.HOST_AUTO_ADMIT = False
    install(make_ext("alpha", grants={"state", "timers", "commands"}))

    row = roster("alpha")
    assert row.admitted_grants == []
    assert row.pending_grants == ["commands", "state", "timers"]

    extension_admit_grants(extension_id="alpha", grants=["state", "timers"], actor="staff")

    row = roster("alpha")
    assert row.admitted_grants == ["state", "timers"]
    assert row.pending_grants == ["commands"]
    assert AuditEntry.objects.filter(action="extension_grants_admitted", actor="staff").exists()


def test_auto_admit_keeps_a_staff_revocation_and_admits_only_newly_requested_grants(
    install, settings
):
    settings.HOST_AUTO_ADMIT = True
    install(make_ext("alpha", grants={"state", "timers"}))
    extension_admit_grants(extension_id="alpha", grants=["state"], actor="staff")

    install(make_ext("alpha", grants={"state", "timers"}))  # every process syncs at start
    assert roster("alpha").admitted_grants == ["state"]

    install(make_ext("alpha", grants={"state", "timers", "commands"}))  # a new version asks more
    row = roster("alpha")
    assert row.admitted_grants == ["commands", "state"]
    assert row.pending_grants == ["timers"]


def test_staff_cannot_admit_a_grant_that_was_not_requested(install):
    from core.errors import HostError

    install(make_ext("alpha", grants={"state"}))

    with pytest.raises(HostError) as raised:
        extension_admit_grants(extension_id="alpha", grants=["send"], actor="staff")
    assert raised.value.cause == "invalid"
    assert roster("alpha").admitted_grants == ["state"]


def test_a_stop_survives_a_process_restart_and_a_new_version_runs_again(install):
    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")
    stopped = roster("alpha")

    # restart the process: forget what was loaded, load the same code, re-open the roster
    registry.reset()
    forget_activations()
    install(make_ext("alpha", on_timer=failing))

    row = roster("alpha")
    assert row.status == ExtensionStatus.STOPPED
    assert (row.reason, row.stopped_at, row.failing_hook) == (
        stopped.reason,
        stopped.stopped_at,
        stopped.failing_hook,
    )
    assert fire_timer("alpha").skip == "stopped"

    install(make_ext("alpha", version="1.0.1", on_timer=put_item("after-upgrade")))

    row = roster("alpha")
    assert row.status == ExtensionStatus.RUNNING
    assert row.reason == "" and row.stopped_at is None
    assert row.last_error == stopped.reason  # kept for staff
    assert fire_timer("alpha").ok


def test_a_changed_contract_is_a_new_revision_and_a_same_contract_is_not(install):
    install(make_ext("alpha"))
    first = roster("alpha").revision

    install(make_ext("alpha"))
    assert roster("alpha").revision == first

    install(make_ext("alpha", pad_max_bytes=512))
    assert roster("alpha").revision != first


def test_an_extension_no_longer_installed_is_uninstalled_keeps_its_data_and_runs_nothing(
    install,
):
    alpha = make_ext("alpha", on_timer=put_item("kept"))
    install(alpha, make_ext("beta"))
    fire_timer("alpha")

    install(make_ext("beta"))

    assert roster("alpha").status == ExtensionStatus.UNINSTALLED
    assert list(
        ExtensionRecord.objects.filter(extension_id="alpha").values_list("key", flat=True)
    ) == ["kept"]
    with registry.installed(alpha):  # an old process still has the code
        assert fire_timer("alpha").skip == "uninstalled"

    install(alpha)  # reinstalled
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_a_stop_survives_an_uninstall_and_a_reinstall_at_the_same_revision(install, fake_clock):
    alpha = make_ext("alpha", on_timer=failing)
    install(alpha, make_ext("beta"))
    fire_timer("alpha")
    fake_clock.advance(seconds=60)
    assert roster_auto_resume_due() == ["alpha"]
    fire_timer("alpha")  # stopped again: the second auto-resume is due in 5 minutes
    stopped = roster("alpha")

    # a process (or a rollback) without it syncs at start, then one with the same code again
    install(make_ext("beta"))
    assert roster("alpha").status == ExtensionStatus.UNINSTALLED
    fake_clock.advance(seconds=300)
    assert roster_auto_resume_due() == []  # an uninstalled extension is not resumed
    install(alpha, make_ext("beta"))

    row = roster("alpha")
    assert row.revision == stopped.revision
    assert row.status == ExtensionStatus.STOPPED
    assert (row.reason, row.stopped_at, row.restart_count, row.next_auto_resume_at) == (
        stopped.reason,
        stopped.stopped_at,
        1,
        stopped.next_auto_resume_at,
    )
    assert row.activation_epoch == stopped.activation_epoch
    assert fire_timer("alpha").skip == "stopped"
    assert roster_auto_resume_due() == ["alpha"]  # its schedule still holds


def test_sync_roster_command_loads_host_extensions_and_reports(db, settings):
    settings.HOST_EXTENSIONS = ["tests.extensions_host.installed:notes"]
    registry.reset()
    out = StringIO()
    try:
        call_command("sync_roster", stdout=out)
    finally:
        registry.reset()

    assert "installed notes" in out.getvalue()
    assert roster("notes").status == ExtensionStatus.RUNNING


def test_sync_roster_command_fails_clearly_on_a_load_error(db, settings):
    settings.HOST_EXTENSIONS = ["tests.extensions_host.installed:missing_attribute"]
    registry.reset()
    try:
        with pytest.raises(CommandError, match="has no attribute 'missing_attribute'"):
            call_command("sync_roster", stdout=StringIO())
    finally:
        registry.reset()


# --- resume ----------------------------------------------------------------------------------


def test_resume_runs_again_clears_the_reason_and_is_audited(install):
    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")

    row = extension_resume(extension_id="alpha", actor="staff")

    assert row.status == ExtensionStatus.RUNNING
    assert row.reason == "" and row.failing_hook == "" and row.stopped_at is None
    assert row.last_error == "on_timer defect: boom"
    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert AuditEntry.objects.filter(action="extension_resumed", actor="staff").count() == 1


def test_resume_of_a_running_extension_is_a_no_op(install):
    install(make_ext("alpha"))
    before = roster("alpha")

    row = extension_resume(extension_id="alpha", actor="staff")

    assert row.status == ExtensionStatus.RUNNING
    assert row.activation_epoch == before.activation_epoch
    assert not AuditEntry.objects.filter(action="extension_resumed").exists()


def test_manage_py_resume_extension(install):
    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")
    out = StringIO()

    call_command("resume_extension", "alpha", stdout=out)

    assert out.getvalue().strip() == "alpha is running"
    assert roster("alpha").status == ExtensionStatus.RUNNING
    with pytest.raises(CommandError):
        call_command("resume_extension", "ghost", stdout=out)


def minutes(n: float) -> dt.timedelta:
    return dt.timedelta(minutes=n)


def test_auto_resume_after_1_5_and_30_minutes_then_it_stays_stopped(install, fake_clock):
    install(make_ext("alpha", on_timer=failing))

    for attempt, backoff in enumerate([1, 5, 30]):
        fire_timer("alpha")
        row = roster("alpha")
        assert row.status == ExtensionStatus.STOPPED
        assert row.restart_count == attempt
        assert row.next_auto_resume_at == row.stopped_at + minutes(backoff)

        fake_clock.advance(seconds=backoff * 60 - 1)
        assert roster_auto_resume_due() == []
        assert roster("alpha").status == ExtensionStatus.STOPPED
        fake_clock.advance(seconds=1)
        assert roster_auto_resume_due() == ["alpha"]
        assert roster("alpha").status == ExtensionStatus.RUNNING
        assert roster("alpha").restart_count == attempt + 1

    fire_timer("alpha")  # the fourth stop: three attempts are spent
    row = roster("alpha")
    assert row.next_auto_resume_at is None
    fake_clock.advance(seconds=24 * 3600)
    assert roster_auto_resume_due() == []
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert AuditEntry.objects.filter(action="extension_auto_resumed").count() == 3

    # a staff resume resets the count: the next stop is auto-resumed after 1 minute again
    extension_resume(extension_id="alpha", actor="staff")
    assert roster("alpha").restart_count == 0
    fire_timer("alpha")
    row = roster("alpha")
    assert row.next_auto_resume_at == row.stopped_at + minutes(1)


def test_a_new_revision_resets_the_auto_resume_count(install, fake_clock):
    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")
    fake_clock.advance(seconds=60)
    roster_auto_resume_due()
    assert roster("alpha").restart_count == 1

    install(make_ext("alpha", version="2", on_timer=failing))

    assert roster("alpha").restart_count == 0


def test_auto_resume_can_be_turned_off_per_extension(install, fake_clock):
    install(make_ext("alpha", on_timer=failing))
    row = roster("alpha")
    row.auto_resume = False
    row.save()

    fire_timer("alpha")
    fake_clock.advance(seconds=3600)

    assert roster("alpha").next_auto_resume_at is None
    assert roster_auto_resume_due() == []
    assert roster("alpha").status == ExtensionStatus.STOPPED


def test_a_new_version_declaring_auto_resume_false_is_not_auto_resumed(install, fake_clock):
    install(make_ext("alpha", on_timer=failing))  # declares the default, auto_resume=True
    install(make_ext("alpha", version="2.0.0", on_timer=failing, auto_resume=False))

    fire_timer("alpha")
    fake_clock.advance(seconds=3600)

    row = roster("alpha")
    assert (row.declared_auto_resume, row.auto_resume_effective) == (False, False)
    assert row.next_auto_resume_at is None
    assert roster_auto_resume_due() == []
    assert roster("alpha").status == ExtensionStatus.STOPPED


def test_auto_resume_needs_both_the_declaration_and_the_staff_switch_across_versions(
    install, fake_clock
):
    from extensions_host.services.roster import extension_limits_update

    install(make_ext("alpha", on_timer=failing, auto_resume=False))
    extension_limits_update(extension_id="alpha", actor="staff", auto_resume=False)
    # a version declaring it again does not undo staff turning it off
    install(make_ext("alpha", version="2.0.0", on_timer=failing))
    row = roster("alpha")
    assert (row.declared_auto_resume, row.auto_resume, row.auto_resume_effective) == (
        True,
        False,
        False,
    )
    fire_timer("alpha")
    fake_clock.advance(seconds=3600)
    assert roster("alpha").next_auto_resume_at is None
    assert roster_auto_resume_due() == []

    # staff turning it on again: the declaration (now True) is followed at the next stop
    extension_resume(extension_id="alpha", actor="staff")
    extension_limits_update(extension_id="alpha", actor="staff", auto_resume=True)
    fire_timer("alpha")
    row = roster("alpha")
    assert row.next_auto_resume_at == row.stopped_at + minutes(1)


def test_the_auto_resume_task_runs_the_sweep(install, fake_clock):
    from extensions_host.tasks import auto_resume_sweep

    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")
    fake_clock.advance(seconds=61)

    auto_resume_sweep()

    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_resume_reattempts_a_failed_migration_and_stays_stopped_if_it_fails_again(install):
    from pydantic import BaseModel

    from extensions_host.sdk import Collection, Extension

    class V(BaseModel):
        k: str

    def boom(row: dict[str, Any]) -> list[dict[str, Any]]:
        raise ValueError("still broken")

    install(
        Extension(
            id="m",
            version="1",
            grants={"state"},
            state_version=1,
            collections={"v": Collection(V, key=lambda v: v.k)},
        )
    )
    assert run_frame(
        extension_id="m", hook="test", call=lambda ctx: ctx.collection("v").put(V(k="one"))
    ).ok
    install(
        Extension(
            id="m",
            version="2",
            grants={"state"},
            state_version=2,
            collections={"v": Collection(V, key=lambda v: v.k)},
            migrations={1: boom},
        )
    )
    assert roster("m").status == ExtensionStatus.STOPPED

    row = extension_resume(extension_id="m", actor="staff")

    assert row.status == ExtensionStatus.STOPPED
    assert row.reason == (
        "migration: state migration from version 1 failed: ValueError: still broken"
    )
    assert roster("m").state_version == 1


def test_contributions_apply_only_for_running_extensions_at_their_revision_with_the_grant(
    install,
):
    from extensions_host.models import RosterEntry
    from extensions_host.services.roster import extensions_running_with

    install(make_ext("alpha", grants={"notify"}), make_ext("beta", grants={"notify"}),
            make_ext("gamma", grants={"notify"}), make_ext("delta", grants={"state"}))  # fmt: skip
    running = lambda: [extension_id for extension_id, _ in extensions_running_with("notify")]  # noqa: E731
    assert running() == ["alpha", "beta", "gamma"]  # in load order; delta lacks the grant
    RosterEntry.objects.filter(pk="alpha").update(status=ExtensionStatus.STOPPED, reason="x")
    RosterEntry.objects.filter(pk="beta").update(revision="0" * 64)  # a revision not loaded
    assert running() == ["gamma"]
    RosterEntry.objects.filter(pk="gamma").update(admitted_grants=[])
    assert running() == []


def test_host_auto_resume_off_holds_back_auto_resumes_already_scheduled(
    install, fake_clock, settings
):
    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")  # stopped while auto-resume is on: scheduled in 1 minute
    scheduled = roster("alpha").next_auto_resume_at
    assert scheduled is not None

    settings.HOST_AUTO_RESUME = False
    fake_clock.advance(seconds=3600)
    assert roster_auto_resume_due() == []
    assert roster("alpha").status == ExtensionStatus.STOPPED

    settings.HOST_AUTO_RESUME = True  # turned on again: what is still due resumes
    assert roster_auto_resume_due() == ["alpha"]
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_the_extension_user_is_the_one_sync_created_and_is_made_again_when_missing(install):
    from extensions_host.services.roster import extension_user

    install(make_ext("alpha"))
    synced = get_user_model().objects.get(username="ext:alpha")

    assert extension_user("alpha") == synced
    assert not synced.is_active
    synced.delete()
    again = extension_user("alpha")
    assert again.username == "ext:alpha"
    assert again.first_name == "Extension alpha"
    assert not again.has_usable_password()
    assert not again.is_active
    assert extension_user("alpha") == again


def test_the_extension_user_cannot_log_in_even_with_a_password_staff_set(install):
    from django.contrib.auth import authenticate

    install(make_ext("alpha"))
    user = get_user_model().objects.get(username="ext:alpha")
    user.is_active = True  # made before users were created inactive, or reactivated by staff
    user.set_password("a long passphrase")
    user.save()

    install(make_ext("alpha"))  # every sync takes its login away again

    assert not get_user_model().objects.get(username="ext:alpha").is_active
    assert authenticate(username="ext:alpha", password="a long passphrase") is None


def test_eligibility_is_one_rule_for_sweeps_and_contributions(install):
    from extensions_host.models import RosterEntry
    from extensions_host.services.roster import eligible_ids, extensions_running_with

    install(make_ext("alpha", grants={"notify"}), make_ext("beta", grants={"notify"}),
            make_ext("gamma", grants={"notify"}))  # fmt: skip
    RosterEntry.objects.filter(pk="alpha").update(status=ExtensionStatus.STOPPED, reason="x")
    RosterEntry.objects.filter(pk="beta").update(revision="0" * 64)

    assert eligible_ids("notify") == ["gamma"]
    assert [e for e, _ in extensions_running_with("notify")] == eligible_ids("notify")
    assert eligible_ids("notify", ids=["alpha", "gamma", "ghost\x00"]) == ["gamma"]


# --- staff limits: auto-resume, deadline override, quota overrides -----------------------------


def test_staff_limits_are_validated_written_and_audited_with_what_changed(install):
    from extensions_host.services.roster import extension_limits_update

    install(make_ext("alpha"))

    extension_limits_update(
        extension_id="alpha",
        actor="staff",
        auto_resume=False,
        deadline_seconds=12,
        quotas={"max_records": 10},
    )

    row = roster("alpha")
    assert (row.auto_resume, row.deadline_seconds, row.quotas) == (False, 12.0, {"max_records": 10})
    entry = AuditEntry.objects.get(action="extension_limits_changed")
    assert (entry.actor, entry.target) == ("staff", "alpha")
    assert entry.detail == {
        "auto_resume": {"before": True, "after": False},
        "deadline_seconds": {"before": None, "after": 12.0},
        "quotas": {"before": {}, "after": {"max_records": 10}},
    }

    extension_limits_update(extension_id="alpha", actor="staff", deadline_seconds=12.0)
    assert AuditEntry.objects.filter(action="extension_limits_changed").count() == 1  # no change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"deadline_seconds": 0}, "Deadline override must be more than 0 and at most 300 seconds"),
        (
            {"deadline_seconds": 301},
            "Deadline override must be more than 0 and at most 300 seconds",
        ),
        ({"quotas": {"max_bogus": 1}}, "Quota overrides are invalid"),
        ({"quotas": {"max_records": -1}}, "Quota overrides are invalid"),
        ({"auto_resume": "yes"}, "Auto-resume must be true or false"),
    ],
)
def test_staff_limits_refuse_invalid_values_and_change_nothing(install, change, message):
    from core.errors import HostError
    from extensions_host.services.roster import extension_limits_update

    install(make_ext("alpha"))

    with pytest.raises(HostError) as raised:
        extension_limits_update(extension_id="alpha", actor="staff", **change)

    assert (raised.value.category, raised.value.cause, raised.value.message) == (
        "contract",
        "invalid",
        message,
    )
    row = roster("alpha")
    assert (row.auto_resume, row.deadline_seconds, row.quotas) == (True, None, {})
    assert not AuditEntry.objects.filter(action="extension_limits_changed").exists()


def test_the_source_of_an_extensions_conversations_fits_the_64_characters_a_source_holds():
    from extensions_host.services.roster import service_source

    assert service_source("alpha") == "ext:alpha"
    longest = "a" * 63  # the longest extension id
    assert service_source(longest) == f"ext:{longest}"[:64]
