"""The extension list and page: figures, sections, grants with confirmation, resume."""

from __future__ import annotations

from django.urls import reverse

from core import clock
from core.models import AuditEntry
from extensions_host.background.models import WorkerState
from extensions_host.models import ExtensionStatus, RosterEntry

from .conftest import STOP_REASON, section
from .data import SECRET_VALUE
from .exts import flaky, keeper

LIST = reverse("admin:extensions_host_rosterentry_changelist")


def page_url(extension_id: str) -> str:
    return reverse("admin:extensions_host_rosterentry_change", args=[extension_id])


def test_the_list_shows_badges_version_grants_lag_timers_and_usage(console, host):
    html = console.get(LIST).content.decode()

    assert '<span class="hy-badge hy-running">running</span>' in html
    assert '<span class="hy-badge hy-stopped">stopped</span>' in html
    assert "1.2.0" in html and "0.1.0" in html
    assert "attention, projection, settled, state, timers" in html
    assert '<span class="hy-num hy-hot">1</span> / 2' in html  # keeper: 1 due of 2 timers
    assert "2 / 100k records" in html
    assert STOP_REASON in html


def test_the_list_filters_by_status(console, host):
    html = console.get(LIST, {"status__exact": "stopped"}).content.decode()

    assert page_url("flaky") in html
    assert page_url("keeper") not in html


def test_the_page_of_a_stopped_extension_shows_its_stop_and_a_resume_button(console, host):
    html = console.get(page_url("flaky")).content.decode()

    stop = section(html, "hy-stop")
    assert STOP_REASON in stop and "on_timer" in stop
    assert reverse("admin:extensions_host_rosterentry_resume", args=["flaky"]) in html


def test_the_page_shows_settings_secret_keys_cursor_timers_documents_attention_audit(console, host):
    html = console.get(page_url("keeper")).content.decode()

    assert "#launch" in section(html, "hy-settings")
    assert "api_token" in section(html, "hy-settings")
    assert SECRET_VALUE not in html
    assert 'id="hy-lag">1<' in html
    timers = section(html, "hy-timers")
    assert "due-now" in timers and "later" in timers and "1 due · 2 pending" in timers
    assert "pad text for c1" in section(html, "hy-documents")
    assert "Review the launch plan" in section(html, "hy-attention")
    assert "nightly failed: timeout" in section(html, "hy-jobs")
    assert "indexer" in section(html, "hy-jobs")
    assert "pager: connection refused" in section(html, "hy-notifiers")
    assert "extension_settings_edited" in section(html, "hy-audit")


def test_the_records_browser_filters_by_collection_key_prefix_and_index(console, host):
    url = page_url("keeper")

    everything = section(console.get(url).content.decode(), "hy-records")
    by_index = section(console.get(url, {"index": "c1"}).content.decode(), "hy-records")
    by_key = section(console.get(url, {"key": "be"}).content.decode(), "hy-records")
    nothing = section(console.get(url, {"collection": "nope"}).content.decode(), "hy-records")

    assert "first note" in everything and "second note" in everything
    assert "first note" in by_index and "second note" not in by_index
    assert "second note" in by_key and "first note" not in by_key
    assert "No records match." in nothing


def grants_form(**changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "admitted_grants": ["attention", "projection", "settled", "state", "timers"],
        "auto_resume": "on",
        "deadline_seconds": "",
        "quotas": "{}",
    }
    data.update(changes)
    return data


def test_changing_admitted_grants_needs_a_confirmation_and_is_audited(console, host):
    url = page_url("keeper")
    fewer = ["projection", "settled", "state", "timers"]

    refused = console.post(url, grants_form(admitted_grants=fewer))
    assert refused.status_code == 200
    assert "Tick the confirmation to change the admitted grants: revoke attention." in (
        refused.content.decode()
    )
    assert "attention" in RosterEntry.objects.get(pk="keeper").admitted_grants

    saved = console.post(url, grants_form(admitted_grants=fewer, confirm_grants="on"))
    assert saved.status_code == 302
    assert RosterEntry.objects.get(pk="keeper").admitted_grants == fewer
    audit = AuditEntry.objects.get(action="extension_grants_admitted", target="keeper")
    assert audit.actor == "staff" and "attention" not in audit.detail["after"]


def test_other_settings_save_without_the_grant_confirmation(console, host):
    saved = console.post(page_url("keeper"), grants_form(auto_resume=""))

    assert saved.status_code == 302
    assert RosterEntry.objects.get(pk="keeper").auto_resume is False


def test_resume_from_the_page_asks_for_confirmation_then_resumes_and_audits(console, host):
    url = reverse("admin:extensions_host_rosterentry_resume", args=["flaky"])

    asked = console.get(url)
    assert asked.status_code == 200 and "Yes, resume" in asked.content.decode()
    assert RosterEntry.objects.get(pk="flaky").status == ExtensionStatus.STOPPED

    done = console.post(url, {"confirm": "yes"})
    assert done.status_code == 302 and done["Location"] == page_url("flaky")
    assert RosterEntry.objects.get(pk="flaky").status == ExtensionStatus.RUNNING
    entry = AuditEntry.objects.get(action="extension_resumed", target="flaky")
    assert entry.actor == "staff" and entry.detail["previous_reason"] == STOP_REASON


def test_bulk_resume_confirms_then_resumes_every_selected_stopped_extension(console, host, install):
    install(keeper(), flaky(), flaky("flaky2"))
    from .conftest import stop

    stop("flaky2")
    selected = {"action": "resume_selected", "_selected_action": ["flaky", "flaky2", "keeper"]}

    asked = console.post(LIST, selected)
    assert "Yes, resume" in asked.content.decode()
    console.post(LIST, {**selected, "confirm": "yes"})

    assert set(RosterEntry.objects.values_list("status", flat=True)) == {"running"}
    assert AuditEntry.objects.filter(action="extension_resumed").count() == 2


def test_resuming_a_running_extension_from_its_page_changes_nothing(console, host):
    response = console.post(
        reverse("admin:extensions_host_rosterentry_resume", args=["keeper"]), {"confirm": "yes"}
    )

    assert response.status_code == 302
    assert not AuditEntry.objects.filter(action="extension_resumed").exists()


def test_non_staff_cannot_open_the_console(client, owner, host):
    client.force_login(owner)
    assert client.get(page_url("keeper")).status_code == 302
    assert client.get(reverse("admin:index")).status_code == 302


def test_a_worker_shows_running_only_while_its_runs_lease_is_live(console, host):
    worker = WorkerState.objects.filter(extension_id="keeper", name="indexer")
    badge = 'indexer</code> <span class="hy-badge hy-warning">running</span>'
    worker.update(running_token="t", running_until=clock.now_ms() + 60_000)
    assert badge in section(console.get(page_url("keeper")).content.decode(), "hy-jobs")

    # a run whose process died: its token stays until a claim records it, its lease ran out
    worker.update(running_until=clock.now_ms() - 1)
    assert badge not in section(console.get(page_url("keeper")).content.decode(), "hy-jobs")


def test_a_declared_worker_that_never_ran_is_listed(console, host, monkeypatch):
    # its state row appears with its first wake; staff see the worker before that
    from extensions_host import registry
    from extensions_host.background.declarations import Worker

    nudge = Worker("nudge", wake_on=["conversation_idle"], run=lambda ctx, wake: None)
    definition = registry.get("keeper").definition
    monkeypatch.setattr(definition, "workers", (nudge,), raising=False)
    html = section(console.get(page_url("keeper")).content.decode(), "hy-jobs")
    assert "worker <code>nudge</code>" in html
    assert "never ran" in html
    assert "worker <code>indexer</code>" in html  # the one with a state row, as before
