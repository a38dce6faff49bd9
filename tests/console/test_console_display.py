"""How the console shows what the host stores: host-clock times as UTC datetimes, JSON as JSON
(never a Python repr), lists as lists, and empty bulk actions as warnings."""

from __future__ import annotations

import json
import re

import pytest
from django.apps import apps
from django.urls import reverse

from core.models import AuditEntry
from extensions_host.models import RosterEntry

from .conftest import section, stop

EPOCH_MS = re.compile(r"\b1[6-9]\d{11}\b")  # a host-clock instant (epoch milliseconds)
PYTHON_REPR = re.compile(r"\{&#x27;[^&]+&#x27;: ")  # {'key': … printed as a Python dict

# (app label, model) of every admin page that shows a host-clock instant
MS_MODELS = [
    ("ext_background", "timer"),
    ("ext_background", "jobstate"),
    ("ext_background", "workerstate"),
    ("ext_surfaces", "attentionitem"),
    ("ext_surfaces", "ambientsurface"),
    ("ext_surfaces", "interaction"),
    ("ext_contributions", "notifierhealth"),
    ("ext_contributions", "notificationdelivery"),
]


def _content(response) -> str:
    assert response.status_code == 200
    html = response.content.decode()
    return html[html.index('id="content"') :]


@pytest.mark.parametrize(("app_label", "model_name"), MS_MODELS)
def test_host_clock_times_are_shown_as_utc_datetimes(console, host, app_label, model_name):
    from core import clock
    from extensions_host.contributions.models import NotificationDelivery

    now = clock.now_ms()  # a delivered notification: both its instants are set
    NotificationDelivery.objects.update(next_attempt_at=now, delivered_at=now)
    model = apps.get_model(app_label, model_name)
    row = model.objects.order_by("pk").last()
    listing = _content(console.get(reverse(f"admin:{app_label}_{model_name}_changelist")))
    page = _content(console.get(reverse(f"admin:{app_label}_{model_name}_change", args=[row.pk])))

    assert not EPOCH_MS.search(listing), EPOCH_MS.findall(listing)
    assert not EPOCH_MS.search(page), EPOCH_MS.findall(page)


def test_the_timer_page_shows_its_due_time_in_the_lists_format(console, host):
    from extensions_host.background.models import Timer

    timer = Timer.objects.get(key="later")
    page = _content(console.get(reverse("admin:ext_background_timer_change", args=[timer.pk])))

    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", page)  # due at, fire at
    assert "keeper/later @ " in page and " UTC" in page  # the title and the breadcrumb


def test_the_job_page_shows_every_schedule_time(console, host):
    page = _content(
        console.get(reverse("admin:ext_background_jobstate_change", args=["ext:keeper:nightly"]))
    )

    for label in ("next run (UTC)", "last run (UTC)", "last scheduled for (UTC)"):
        assert label[0].upper() + label[1:] in page


def test_the_world_debug_view_shows_payloads_and_attempts_as_json(console, host):
    html = console.get(reverse("admin:artifacts_world_debug", args=["c1"])).content.decode()

    assert not PYTHON_REPR.search(html)
    assert "{\n  &quot;steps&quot;: 3\n}" in html  # pretty-printed JSON artifact
    assert "&quot;: 1" in html  # the request attempts, as JSON
    assert '<pre class="hy-json">' in html and ".hy-json" in html  # wrapped, inside the page


def test_the_world_debug_view_keeps_long_payloads_inside_the_page(console, host):
    html = console.get(reverse("admin:artifacts_world_debug", args=["c1"])).content.decode()
    style = html[html.index(".hy-json") : html.index("</style>")]

    assert "overflow: auto" in style and "max-width" in style and "pre-wrap" in style


def test_the_extension_audit_trail_shows_details_as_json(console, host):
    stop("keeper", reason="boom")
    entry = AuditEntry.objects.filter(target="keeper").exclude(detail={}).latest("at")
    html = console.get(
        reverse("admin:extensions_host_rosterentry_change", args=["keeper"])
    ).content.decode()
    trail = section(html, "hy-audit")

    assert not PYTHON_REPR.search(trail)
    assert json.dumps(entry.detail, ensure_ascii=False).replace('"', "&quot;") in trail


def test_the_extension_page_lists_requested_grants(console, host):
    row = RosterEntry.objects.get(pk="keeper")
    html = _content(
        console.get(reverse("admin:extensions_host_rosterentry_change", args=["keeper"]))
    )

    assert ", ".join(row.requested_grants) in html
    assert "[&quot;" not in html  # not the raw JSON list


def test_resuming_only_running_extensions_warns_and_audits_nothing(console, host):
    audited = AuditEntry.objects.count()
    response = console.post(
        reverse("admin:extensions_host_rosterentry_changelist"),
        {"action": "resume_selected", "index": "0", "_selected_action": ["keeper"]},
        follow=True,
    )

    shown = [(m.level_tag, m.message) for m in response.context["messages"]]
    assert shown == [("warning", "None of the selected extensions is stopped: nothing to resume.")]
    assert AuditEntry.objects.count() == audited
    assert RosterEntry.objects.get(pk="flaky").status == "stopped"


def test_the_admin_is_branded(console, host):
    html = console.get(reverse("admin:index")).content.decode()

    assert "Django administration" not in html and "Django site admin" not in html
    assert "Hyphae console" in html


def test_the_menu_spells_its_plurals(console, host):
    html = console.get(reverse("admin:index")).content.decode()

    assert "Lifecycle deliveries" in html and "Notification deliveries" in html
    assert "deliverys" not in html
