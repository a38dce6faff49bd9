"""The console shows and changes no more than a staff user's Django permissions allow: the
extension list's actions (resume, admit grants, purge) and the jobs' "run now" take the
model's change permission, and the index dashboard shows only the parts whose model the user
may view."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin import helpers
from django.contrib.auth.models import Permission
from django.test import Client

from core.models import AuditEntry
from core.services import audit_record
from extensions_host.background.models import JobTrigger
from extensions_host.background.services.jobs import jobs_declared, jobs_ensure
from extensions_host.models import ExtensionRecord, ExtensionStatus, RosterEntry
from extensions_host.runtime import extension_stop, run_frame
from tests.extensions_host.exts import Item, make_ext

from .exts import reporter

EXTENSIONS = "/admin/extensions_host/rosterentry/"
JOBS = "/admin/ext_background/jobstate/"
NIGHTLY = "ext:reporter:nightly"
REASON = "on_timer defect: RuntimeError: upstream said customer 1234 is overdue"


@pytest.fixture
def staff(make_user: Any):
    """`staff(name, *codenames)`: a signed-in staff client with exactly these permissions."""

    def make(name: str, *codenames: str) -> Client:
        user = make_user(name, is_staff=True)
        user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
        client = Client()
        client.force_login(user)
        return client

    return make


def action(client: Client, url: str, name: str, ids: list[str]) -> Any:
    return client.post(url, {"action": name, helpers.ACTION_CHECKBOX_NAME: ids, "confirm": "yes"})


def offered(client: Client, url: str) -> set[str]:
    form = client.get(url).context["action_form"]
    return set() if form is None else {value for value, _ in form.fields["action"].choices}


def test_resume_and_admit_take_the_change_permission(install, staff, settings):
    settings.HOST_AUTO_ADMIT = False
    install(make_ext("alpha", grants={"state", "timers"}))
    extension_stop(extension_id="alpha", hook="on_timer", reason="boom")
    viewer = staff("viewer", "view_rosterentry")
    changer = staff("changer", "view_rosterentry", "change_rosterentry")

    assert not offered(viewer, EXTENSIONS) & {"resume_selected", "admit_requested_grants"}
    action(viewer, EXTENSIONS, "resume_selected", ["alpha"])
    action(viewer, EXTENSIONS, "admit_requested_grants", ["alpha"])
    alpha = RosterEntry.objects.get(pk="alpha")
    assert (alpha.status, alpha.admitted_grants) == (ExtensionStatus.STOPPED, [])
    assert not AuditEntry.objects.filter(action="extension_resumed").exists()

    assert {"resume_selected", "admit_requested_grants"} <= offered(changer, EXTENSIONS)
    action(changer, EXTENSIONS, "resume_selected", ["alpha"])
    action(changer, EXTENSIONS, "admit_requested_grants", ["alpha"])
    alpha = RosterEntry.objects.get(pk="alpha")
    assert (alpha.status, alpha.admitted_grants) == (ExtensionStatus.RUNNING, ["state", "timers"])


def test_purging_an_uninstalled_extensions_data_takes_the_change_permission(install, staff):
    install(make_ext("alpha"), make_ext("beta"))
    put = run_frame(
        extension_id="alpha", hook="test", call=lambda c: c.collection("item").put(Item(key="k"))
    )
    assert put.ok
    install(make_ext("beta"))  # alpha is uninstalled now

    action(staff("viewer", "view_rosterentry"), EXTENSIONS, "purge_uninstalled", ["alpha"])
    assert ExtensionRecord.objects.filter(extension_id="alpha").count() == 1

    changer = staff("changer", "view_rosterentry", "change_rosterentry")
    action(changer, EXTENSIONS, "purge_uninstalled", ["alpha"])
    assert not ExtensionRecord.objects.filter(extension_id="alpha").exists()


def test_running_a_job_now_takes_the_change_permission(install, staff):
    install(reporter([False]))
    jobs_ensure(jobs_declared())

    viewer = staff("viewer", "view_jobstate")
    assert "trigger_selected" not in offered(viewer, JOBS)
    action(viewer, JOBS, "trigger_selected", [NIGHTLY])
    assert not JobTrigger.objects.exists()

    action(
        staff("changer", "view_jobstate", "change_jobstate"), JOBS, "trigger_selected", [NIGHTLY]
    )
    assert JobTrigger.objects.filter(job_id=NIGHTLY).count() == 1


def test_the_dashboard_shows_only_the_parts_the_user_may_view(install, staff):
    install(make_ext("alpha"))
    extension_stop(extension_id="alpha", hook="on_timer", reason=REASON)
    audit_record(actor="boss", action="user_deleted", target="payroll-conversation-42")

    nothing = staff("nobody").get("/admin/").content.decode()
    assert 'id="hy-dashboard"' not in nothing
    assert "customer 1234" not in nothing and "payroll-conversation-42" not in nothing

    timers_only = staff("timekeeper", "view_timer").get("/admin/").content.decode()
    assert 'id="hy-timers-due"' in timers_only
    assert 'id="hy-stopped-count"' not in timers_only and "customer 1234" not in timers_only
    assert 'id="hy-audit"' not in timers_only

    viewer = staff("viewer", "view_rosterentry", "view_auditentry")
    page = viewer.get("/admin/").content.decode()
    assert "customer 1234" in page and "payroll-conversation-42" in page
    assert "Resume…" not in page  # the resume button is a change
    assert 'id="hy-timers-due"' not in page
