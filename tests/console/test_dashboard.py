"""The admin index: the figures that matter at a glance."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from extensions_host.background.models import Timer
from extensions_host.background.services.jobs import job_run, job_trigger
from extensions_host.contributions.models import Notification
from extensions_host.services.roster import extension_resume
from inspector.console import ROWS

from .conftest import STOP_REASON, section
from .data import fill_host
from .exts import flaky, keeper, reporter


@pytest.fixture
def host(install, owner):
    install(keeper(), flaky())
    return fill_host(owner)


def figure(html: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', html)
    assert match, element_id
    return match.group(1).strip()


def test_the_dashboard_shows_stopped_extensions_with_their_reasons(console, host):
    html = console.get(reverse("admin:index")).content.decode()

    assert figure(html, "hy-running") == "1"
    assert figure(html, "hy-stopped-count") == "1"
    stopped = html[html.index('id="hy-stopped"') :]
    assert "flaky" in stopped and STOP_REASON in stopped
    assert reverse("admin:extensions_host_rosterentry_resume", args=["flaky"]) in stopped


def test_the_dashboard_shows_lag_timer_backlog_failed_jobs_and_notifier_failures(console, host):
    html = console.get(reverse("admin:index")).content.decode()

    assert figure(html, "hy-max-lag") == "1"  # keeper's cursor is 0, one run settled
    assert figure(html, "hy-timers-due") == "1"
    assert re.search(r"2 pending · oldest due \d+ s ago", html)
    assert figure(html, "hy-failed-jobs") == "1"
    assert "nightly failed: timeout" in html
    assert figure(html, "hy-notifier-failures") == "1"
    assert "pager: connection refused" in html


def test_the_dashboard_says_all_is_well_when_nothing_is_wrong(console, install, owner):
    install(keeper())
    html = console.get(reverse("admin:index")).content.decode()

    assert "Every installed extension is running." in html
    assert figure(html, "hy-stopped-count") == "0"
    assert figure(html, "hy-timers-due") == "0"


def test_resuming_clears_the_stopped_row_and_lists_the_resume_in_recent_audit(console, host):
    extension_resume(extension_id="flaky", actor="staff")
    Timer.objects.all().delete()

    html = console.get(reverse("admin:index")).content.decode()

    assert figure(html, "hy-stopped-count") == "0"
    assert STOP_REASON not in html
    audit = html[html.index('id="hy-audit"') :]
    assert "extension_resumed" in audit and "flaky" in audit


def test_the_dashboard_figures_are_the_ones_meta_and_metrics_give(install, host):
    from extensions_host.contributions.services.meta import lag_figures
    from inspector.console import dashboard_read

    install(keeper())  # flaky is uninstalled now: its due timer is nobody's backlog any more
    now = Timer.objects.get(key="due-now").fire_at
    Timer.objects.create(extension_id="flaky", key="orphan", due_at=now - 9000, fire_at=now - 9000)

    dash, lag = dashboard_read(user=User(is_superuser=True, is_active=True)), lag_figures()

    assert (dash["timers_due"], dash["timers_pending"]) == (1, 2)
    assert (dash["timers_due"], dash["timers_pending"]) == (
        lag["timers"]["due"],
        lag["timers"]["pending"],
    )
    assert dash["max_lag"] == lag["settled"]["max_lag"] == 1
    assert dash["core_cursor"] == lag["settled"]["core_cursor"]
    assert dash["lifecycle_backlog"] == sum(lag["outbox"]["pending"].values()) == 1


NIGHTLY = "ext:reporter:nightly"


def test_every_job_run_that_failed_in_the_last_day_counts_even_after_the_job_recovered(
    console, install
):
    failing = [True]
    install(keeper(), reporter(failing))

    def run(fails: bool) -> str:
        failing[0] = fails
        job_trigger(job_id=NIGHTLY, actor="staff")
        return job_run(job_id=NIGHTLY)

    assert [run(True), run(False), run(True), run(False)] == ["failed", "ok", "failed", "ok"]

    html = console.get(reverse("admin:index")).content.decode()
    assert figure(html, "hy-failed-jobs") == "2"  # the job's latest run went well
    jobs = section(html, "hy-jobs")
    assert NIGHTLY in jobs and "quota at the provider" in jobs

    Notification.objects.update(created_at=timezone.now() - dt.timedelta(days=1, seconds=5))
    html = console.get(reverse("admin:index")).content.decode()
    assert figure(html, "hy-failed-jobs") == "0"
    assert 'id="hy-jobs"' not in html


def test_the_failed_job_runs_figure_counts_past_the_rows_shown_and_leaves_out_workers(
    console, install
):
    install(keeper())
    Notification.objects.bulk_create(
        Notification(type="job.failed", title="failed", job_id=f"ext:keeper:job{n:03}")
        for n in range(ROWS + 10)
    )
    Notification.objects.create(type="job.failed", title="w", job_id="ext:keeper:worker:tidy")

    html = console.get(reverse("admin:index")).content.decode()

    assert figure(html, "hy-failed-jobs") == str(ROWS + 10)
    assert section(html, "hy-jobs").count("<tr><td>ext:keeper:job") == ROWS
    assert "worker:tidy" not in html


def test_an_extension_waiting_for_its_grants_is_shown_with_the_admit_action(
    console, install, settings
):
    """Production (HOST_AUTO_ADMIT=false) installs every extension with no grant admitted: it
    is `running`, yet nothing it requested runs. The dashboard must not call that all well."""
    settings.HOST_AUTO_ADMIT = False
    install(keeper())

    html = console.get(reverse("admin:index")).content.decode()

    assert "Every installed extension is running." not in html
    assert figure(html, "hy-waiting-count") == "1"
    waiting = section(html, "hy-waiting")
    assert reverse("admin:extensions_host_rosterentry_change", args=["keeper"]) in waiting
    assert "attention, projection, settled, state, timers" in waiting
    assert 'name="action" value="admit_requested_grants"' in waiting
    assert 'name="_selected_action" value="keeper"' in waiting

    # the button leads to the action's confirmation page, and confirming admits the grants
    changelist = reverse("admin:extensions_host_rosterentry_changelist")
    form = {"action": "admit_requested_grants", "index": "0", "_selected_action": "keeper"}
    confirm = console.post(changelist, form)
    assert confirm.status_code == 200 and "Yes, admit" in confirm.content.decode()
    console.post(changelist, {**form, "confirm": "yes"})

    html = console.get(reverse("admin:index")).content.decode()
    assert 'id="hy-waiting"' not in html
    assert "Every installed extension is running." in html
