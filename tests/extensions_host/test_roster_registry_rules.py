"""The roster's sync, grants, resume and auto-resume, and the registry's discovery: rules the
rest of the suite left unguarded (spec 02 §1, §2, §3, §7)."""

from __future__ import annotations

import importlib.metadata
import sys
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pydantic import BaseModel

from conversations.models import SettledCounter
from core.errors import HostError
from core.models import AuditEntry
from extensions_host import registry
from extensions_host.background.models import SettledCursor
from extensions_host.models import ExtensionStatus
from extensions_host.registry import ExtensionLoadError
from extensions_host.runtime import run_frame
from extensions_host.sdk import Collection, Extension
from extensions_host.services import roster as roster_service
from extensions_host.services.roster import (
    extension_admit_grants,
    extension_limits_update,
    extension_purge,
    extension_resume,
    roster_auto_resume_due,
    roster_sync,
    roster_sync_at_start,
)

from .conftest import fire_timer, roster
from .exts import make_ext


def failing(ctx: Any, timer: Any) -> None:
    raise RuntimeError("boom")


# --- sync -------------------------------------------------------------------------------------


def test_a_sync_reports_an_extension_uninstalled_once_not_at_every_later_sync(install):
    install(make_ext("alpha"), make_ext("beta"))
    install(make_ext("beta"))
    uninstalled_at = roster("alpha").updated_at

    report = roster_sync()

    assert report.uninstalled == []
    assert roster("alpha").status == ExtensionStatus.UNINSTALLED
    assert roster("alpha").updated_at == uninstalled_at


def test_a_sync_reports_an_extension_kept_stopped_at_the_same_revision(install):
    install(make_ext("alpha", on_timer=failing), make_ext("beta"))
    fire_timer("alpha")

    out = StringIO()
    call_command("sync_roster", stdout=out)

    assert "still stopped alpha" in out.getvalue()
    assert "beta" not in out.getvalue()
    assert roster_sync().kept_stopped == ["alpha"]


def test_an_upgrade_writes_the_new_version_and_fingerprint(install):
    install(make_ext("alpha"))

    install(make_ext("alpha", version="1.0.1"))

    row = roster("alpha")
    loaded = registry.get("alpha")
    assert (row.version, row.revision, row.fingerprint) == (
        "1.0.1",
        loaded.revision,
        loaded.fingerprint,
    )


def test_a_grant_no_longer_requested_is_no_longer_admitted_and_needs_admission_when_back(
    install, settings
):
    settings.HOST_AUTO_ADMIT = False
    install(make_ext("alpha", grants={"state", "timers"}))
    extension_admit_grants(extension_id="alpha", grants=["state", "timers"], actor="staff")

    install(make_ext("alpha", version="2", grants={"state"}))
    assert roster("alpha").admitted_grants == ["state"]

    install(make_ext("alpha", version="3", grants={"state", "timers"}))  # asked again
    row = roster("alpha")
    assert row.admitted_grants == ["state"]
    assert row.pending_grants == ["timers"]


def test_a_sync_reports_an_extension_its_failed_migration_stopped(install):
    class V(BaseModel):
        k: str

    def boom(row: dict[str, Any]) -> list[dict[str, Any]]:
        raise ValueError("broken")

    def version(n: int, **extra: Any) -> Extension:
        collections = {"v": Collection(V, key=lambda v: v.k)}
        return Extension(id="m", version=str(n), grants={"state"}, state_version=n,
                         collections=collections, **extra)  # fmt: skip

    install(version(1))
    assert run_frame(
        extension_id="m", hook="test", call=lambda ctx: ctx.collection("v").put(V(k="one"))
    ).ok

    with registry.installed(version(2, migrations={1: boom})):
        report = roster_sync()

    reason = "migration: state migration from version 1 failed: ValueError: broken"
    assert report.stopped == {"m": reason}
    assert roster("m").reason == reason


def test_a_new_settled_consumer_gets_a_cursor_at_the_core_cursor_when_synced(install):
    """Not at 0: a new consumer does not replay all history (spec 02 §2 step 2)."""
    SettledCounter.objects.update_or_create(pk=1, defaults={"value": 7})

    install(make_ext("alpha", grants={"settled"}), make_ext("beta", grants={"state"}))

    assert list(SettledCursor.objects.values_list("extension_id", "position")) == [("alpha", 7)]


def test_a_reinstall_of_a_running_extension_runs_activate_again(install):
    """An uninstall and reinstall is a fresh start for every process that had activated it."""
    activations: list[str] = []
    alpha = make_ext(
        "alpha",
        activate=lambda ctx: activations.append("alpha"),
        on_timer=lambda ctx, timer: None,
    )
    install(alpha)
    assert fire_timer("alpha").ok
    assert fire_timer("alpha").ok
    assert activations == ["alpha"]

    with registry.installed(make_ext("beta")):  # a process without it syncs
        roster_sync()
    assert roster("alpha").status == ExtensionStatus.UNINSTALLED
    roster_sync()  # this process, with it, syncs again: reinstalled, running

    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert fire_timer("alpha").ok
    assert activations == ["alpha", "alpha"]


def test_the_startup_sync_skips_only_an_unavailable_store_and_raises_any_other_host_error(
    db, monkeypatch
):
    def unavailable() -> None:
        raise HostError("store", "unavailable", "Store is unavailable")

    def invalid() -> None:
        raise HostError("contract", "invalid", "Something else")

    monkeypatch.setattr(roster_service, "roster_sync", unavailable)
    assert roster_sync_at_start() is None

    monkeypatch.setattr(roster_service, "roster_sync", invalid)
    with pytest.raises(HostError) as raised:
        roster_sync_at_start()
    assert raised.value.cause == "invalid"


# --- resume and auto-resume -------------------------------------------------------------------


def test_resuming_an_uninstalled_extension_is_a_conflict_and_changes_nothing(install):
    install(make_ext("alpha", on_timer=failing), make_ext("beta"))
    fire_timer("alpha")
    install(make_ext("beta"))

    with pytest.raises(HostError) as raised:
        extension_resume(extension_id="alpha", actor="staff")

    assert (raised.value.category, raised.value.cause, raised.value.message) == (
        "contract",
        "conflict",
        "Extension is uninstalled",
    )
    assert roster("alpha").status == ExtensionStatus.UNINSTALLED
    assert not AuditEntry.objects.filter(action="extension_resumed").exists()


def test_staff_turning_auto_resume_off_cancels_an_auto_resume_already_scheduled(
    install, fake_clock
):
    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")
    assert roster("alpha").next_auto_resume_at is not None

    extension_limits_update(extension_id="alpha", actor="staff", auto_resume=False)
    fake_clock.advance(seconds=3600)

    assert roster_auto_resume_due() == []
    assert roster("alpha").status == ExtensionStatus.STOPPED


def test_code_declaring_auto_resume_off_at_the_same_revision_cancels_a_scheduled_one(
    install, fake_clock
):
    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")
    scheduled = roster("alpha")
    assert scheduled.next_auto_resume_at is not None

    install(make_ext("alpha", on_timer=failing, auto_resume=False))  # not part of the revision
    row = roster("alpha")
    assert (row.revision, row.status) == (scheduled.revision, ExtensionStatus.STOPPED)
    fake_clock.advance(seconds=3600)

    assert roster_auto_resume_due() == []
    assert roster("alpha").status == ExtensionStatus.STOPPED


def test_the_schedule_shown_follows_staff_switching_auto_resume_off_and_on_again(
    install, fake_clock
):
    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")
    stopped = roster("alpha")

    extension_limits_update(extension_id="alpha", actor="staff", auto_resume=False)
    assert roster("alpha").next_auto_resume_at is None

    fake_clock.advance(seconds=3600)
    extension_limits_update(extension_id="alpha", actor="staff", auto_resume=True)
    # due where its backoff from the stop puts it: passed, so the next sweep resumes it
    assert roster("alpha").next_auto_resume_at == stopped.next_auto_resume_at
    assert roster_auto_resume_due() == ["alpha"]


def test_the_schedule_shown_follows_the_code_declaring_auto_resume_off_and_on_again(
    install, fake_clock
):
    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")
    scheduled = roster("alpha").next_auto_resume_at

    install(make_ext("alpha", on_timer=failing, auto_resume=False))
    assert roster("alpha").next_auto_resume_at is None

    install(make_ext("alpha", on_timer=failing))
    assert roster("alpha").next_auto_resume_at == scheduled


def test_switching_auto_resume_on_a_running_extension_schedules_nothing(install):
    install(make_ext("alpha"))
    extension_limits_update(extension_id="alpha", actor="staff", auto_resume=False)

    extension_limits_update(extension_id="alpha", actor="staff", auto_resume=True)

    assert roster("alpha").next_auto_resume_at is None


@pytest.mark.parametrize(
    "call",
    [
        lambda: extension_resume(extension_id="ghost\x00", actor="staff"),
        lambda: extension_admit_grants(extension_id="ghost\x00", grants=[], actor="staff"),
        lambda: extension_limits_update(extension_id="ghost\x00", actor="staff", auto_resume=True),
        lambda: extension_purge(extension_id="ghost\x00", actor="staff"),
    ],
    ids=["resume", "admit_grants", "limits_update", "purge"],
)
def test_staff_services_find_no_extension_by_an_id_none_could_have_without_reading_it(db, call):
    """A NUL would be a driver error on PostgreSQL, not an answer."""
    with CaptureQueriesContext(connection) as queries, pytest.raises(HostError) as raised:
        call()

    assert (raised.value.category, raised.value.cause) == ("store", "not_found")
    assert not [query for query in queries if "SELECT" in query["sql"]]


def test_the_auto_resume_sweep_takes_the_longest_due_first_up_to_its_limit(install, fake_clock):
    install(
        make_ext("alpha", on_timer=failing),
        make_ext("beta", on_timer=failing),
        make_ext("gamma", on_timer=failing),
    )
    fire_timer("beta")
    fake_clock.advance(seconds=10)
    fire_timer("alpha")
    fake_clock.advance(seconds=10)
    fire_timer("gamma")
    fake_clock.advance(seconds=3600)

    assert roster_auto_resume_due(limit=1) == ["beta"]
    assert roster_auto_resume_due(limit=2) == ["alpha", "gamma"]
    assert roster("gamma").status == ExtensionStatus.RUNNING


def test_resume_listeners_hear_a_resume_when_it_commits_and_not_a_no_op_resume(
    install, monkeypatch, django_capture_on_commit_callbacks
):
    heard: list[str] = []
    monkeypatch.setattr(roster_service, "resume_listeners", [heard.append])
    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")

    with django_capture_on_commit_callbacks(execute=True):
        extension_resume(extension_id="alpha", actor="staff")
    assert heard == ["alpha"]

    with django_capture_on_commit_callbacks(execute=True):
        extension_resume(extension_id="alpha", actor="staff")  # running: a no-op
    assert heard == ["alpha"]


# --- staff admission and limits ---------------------------------------------------------------


def test_staff_admitting_a_grant_twice_stores_it_once_sorted(install, settings):
    settings.HOST_AUTO_ADMIT = False
    install(make_ext("alpha", grants={"state", "timers"}))

    row = extension_admit_grants(
        extension_id="alpha", grants=["timers", "state", "timers"], actor="staff"
    )

    assert row.admitted_grants == ["state", "timers"]
    assert roster("alpha").admitted_grants == ["state", "timers"]


def test_a_deadline_override_of_exactly_300_seconds_is_accepted(install):
    install(make_ext("alpha"))

    extension_limits_update(extension_id="alpha", actor="staff", deadline_seconds=300)

    assert roster("alpha").deadline_seconds == 300.0


def test_a_boolean_deadline_override_is_refused(install):
    install(make_ext("alpha"))

    with pytest.raises(HostError) as raised:
        extension_limits_update(extension_id="alpha", actor="staff", deadline_seconds=True)

    assert raised.value.message == "Deadline override must be more than 0 and at most 300 seconds"
    assert roster("alpha").deadline_seconds is None


def test_staff_clear_a_deadline_override_and_quota_overrides_with_none(install):
    install(make_ext("alpha"))
    extension_limits_update(
        extension_id="alpha", actor="staff", deadline_seconds=12, quotas={"max_records": 10}
    )

    extension_limits_update(extension_id="alpha", actor="staff", deadline_seconds=None, quotas=None)

    row = roster("alpha")
    assert (row.deadline_seconds, row.quotas) == (None, {})
    latest = AuditEntry.objects.filter(action="extension_limits_changed").latest("pk")
    assert latest.detail == {
        "deadline_seconds": {"before": 12.0, "after": None},
        "quotas": {"before": {"max_records": 10}, "after": {}},
    }


# --- the registry -----------------------------------------------------------------------------


def discovery_error() -> str:
    """The load error of a fresh discovery (entry points and `HOST_EXTENSIONS` as set now);
    the registry is reset again after it, for the next test."""
    registry.reset()
    try:
        with pytest.raises(ExtensionLoadError) as raised:
            registry.loaded()
    finally:
        registry.reset()
    return str(raised.value)


def test_the_loaded_set_is_sorted_by_id_whatever_the_discovery_order():
    loaded = registry.load([("one", make_ext("beta")), ("two", make_ext("alpha"))])

    assert list(loaded) == ["alpha", "beta"]


def test_one_definition_listed_twice_is_loaded_once():
    """An entry point and a `HOST_EXTENSIONS` path can name the same object."""
    alpha = make_ext("alpha")

    loaded = registry.load([("entry point alpha", alpha), ("HOST_EXTENSIONS x:alpha", alpha)])

    assert list(loaded) == ["alpha"]
    assert loaded["alpha"].source == "entry point alpha"


def test_a_candidate_that_is_not_an_extension_is_a_load_error_naming_its_source():
    with pytest.raises(ExtensionLoadError) as raised:
        registry.load([("HOST_EXTENSIONS pkg:thing", {"id": "alpha"})])  # type: ignore[list-item]

    assert str(raised.value) == "HOST_EXTENSIONS pkg:thing is not an extensions_host.sdk.Extension"


def test_an_unparseable_sdk_range_is_a_load_error_naming_it():
    ext = make_ext("alpha", sdk="one point oh")

    with pytest.raises(ExtensionLoadError) as raised:
        registry.load([("x", ext)])

    assert str(raised.value) == "Extension alpha declares an invalid SDK range 'one point oh'"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (
            "tests.extensions_host.exts",
            "HOST_EXTENSIONS entry 'tests.extensions_host.exts' is a module with 0 extensions; "
            "name one as module:attribute",
        ),
        ("no_such_package_anywhere", "HOST_EXTENSIONS entry 'no_such_package_anywhere' cannot "
         "be imported"),
    ],
)  # fmt: skip
def test_host_extensions_paths_that_name_no_one_extension_are_load_errors(
    settings, monkeypatch, path, message
):
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    settings.HOST_EXTENSIONS = [path]

    assert discovery_error() == message


def test_an_entry_point_that_fails_to_load_is_a_load_error_naming_it(settings, monkeypatch):
    class EntryPoint:
        name = "broken-plugin"
        value = "broken_pkg:extension"

        def load(self) -> Any:
            raise RuntimeError("missing dependency")

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [EntryPoint()])
    settings.HOST_EXTENSIONS = []

    assert discovery_error() == (
        "Extension entry point broken-plugin (broken_pkg:extension) cannot be loaded: "
        "missing dependency"
    )


def test_the_fingerprint_changes_with_the_code_of_the_defining_module(tmp_path, monkeypatch):
    module = tmp_path / "fingerprinted_ext.py"
    module.write_text(
        "from extensions_host.sdk import Extension\n\n"
        "extension = Extension(id='printed', version='1')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fingerprinted_ext", raising=False)
    definition = registry.resolve("fingerprinted_ext:extension")
    first = registry.load_one(definition, "x")

    module.write_text(module.read_text() + "# a change in the code, not in the contract\n")
    changed = registry.load_one(definition, "x")

    assert changed.revision == first.revision
    assert changed.fingerprint != first.fingerprint

    module.unlink()  # code whose file is gone (a zipped or frozen package) still loads
    gone = registry.load_one(definition, "x")
    assert gone.revision == first.revision
    assert gone.fingerprint not in {first.fingerprint, changed.fingerprint}


def test_nested_installed_sets_restore_the_outer_one():
    with registry.installed(make_ext("alpha")):
        with registry.installed(make_ext("beta")):
            assert list(registry.loaded()) == ["beta"]
        assert list(registry.loaded()) == ["alpha"]
