"""What staff and clients see: cursor, lag and timers in the roster detail; the admin pages."""

from __future__ import annotations

from typing import Any

import pytest

from extensions_host.background.declarations import Job, add_job
from extensions_host.background.models import JobTrigger
from extensions_host.background.services.jobs import jobs_run_due
from extensions_host.background.services.settled import settled_cursor_initialise

from .conftest import in_frame, settle_runs
from .exts import make_ext


def test_the_extension_detail_shows_settled_cursor_and_lag_and_timers_due(
    install, api, owner, conversation, fake_clock
):
    install(make_ext("alpha", on_settled=lambda ctx, runs: None))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    settle_runs("c1", 3)
    now = fake_clock.now_ms()
    in_frame(
        "alpha", lambda ctx: [ctx.timers.set("due", now - 500), ctx.timers.set("later", now + 1)]
    )

    body = api(owner).get("/v1/extensions/alpha").json()

    assert body["settled"]["lag"] == 3
    assert body["settled"]["cursor"] + 3 == body["settled"]["core_cursor"]
    assert body["timers"] == {
        "pending": 2,
        "due": 1,
        "oldest_due_age_ms": 500,
        "max_timers": 10_000,
    }


@pytest.mark.parametrize(
    "model",
    ["timer", "settledcursor", "lifecycledelivery", "workerstate", "jobstate"],
)
def test_the_admin_lists_background_state(client: Any, staff: Any, install, model: str):
    install(make_ext("alpha"))
    client.force_login(staff)

    assert client.get(f"/admin/ext_background/{model}/").status_code == 200


def test_staff_can_trigger_a_job_from_the_admin(client: Any, staff: Any, install, sent):
    ext = make_ext("alpha")
    add_job(ext, Job("tick", every_seconds=60, action=lambda ctx, run: None))
    install(ext)
    jobs_run_due()
    client.force_login(staff)

    response = client.post(
        "/admin/ext_background/jobstate/",
        {"action": "trigger_selected", "_selected_action": ["ext:alpha:tick"]},
        follow=True,
    )

    assert response.status_code == 200
    assert JobTrigger.objects.filter(job_id="ext:alpha:tick", actor="staff").exists()


def test_purging_removes_an_extensions_background_state(install, conversation, sent):
    from core.services import lifecycle_record
    from extensions_host.background.models import LifecycleDelivery, SettledCursor, Timer
    from extensions_host.background.services.lifecycle import lifecycle_fanout
    from extensions_host.background.services.purge import extension_background_purge

    install(make_ext("alpha", lifecycle={"conversation_created": lambda ctx, event: None}))
    settled_cursor_initialise(extension_id="alpha")
    in_frame("alpha", lambda ctx: ctx.timers.set("k", 1))
    lifecycle_record(kind="conversation_created", conversation_id="c", payload={})
    lifecycle_fanout()

    removed = extension_background_purge(extension_id="alpha")

    assert removed["timers"] == 1 and removed["lifecycle_deliveries"] == 1
    assert not Timer.objects.exists()
    assert not SettledCursor.objects.exists()
    assert not LifecycleDelivery.objects.exists()


def test_the_backlog_figures_give_consumer_lag_timer_backlog_and_outbox_of_installed_ones(
    install, conversation, fake_clock
):
    from extensions_host.background.models import LifecycleDelivery
    from extensions_host.background.services.backlog import backlog_figures

    install(
        make_ext("alpha", on_settled=lambda ctx, runs: None),
        make_ext("beta", grants={"state", "timers"}),
        make_ext("gone", on_settled=lambda ctx, runs: None),
    )
    conversation("c1")
    settle_runs("c1", 2)
    now = fake_clock.now_ms()
    in_frame("alpha", lambda ctx: [ctx.timers.set("a", now - 900), ctx.timers.set("b", now - 5)])
    in_frame("beta", lambda ctx: ctx.timers.set("later", now + 60_000))
    in_frame("gone", lambda ctx: ctx.timers.set("old", now - 99_000))
    LifecycleDelivery.objects.create(extension_id="alpha", event_id=1, kind="conversation_created")
    install(
        make_ext("alpha", on_settled=lambda ctx, runs: None),
        make_ext("beta", grants={"state", "timers"}),
    )  # `gone` is uninstalled: its timers and cursor are no backlog

    figures = backlog_figures()

    core = figures["settled"]["core_cursor"]
    assert figures["settled"]["consumers"] == {
        "alpha": {"cursor": core - 2, "core_cursor": core, "lag": 2}
    }
    assert figures["settled"]["max_lag"] == 2
    assert figures["timers"] == {
        "pending": 3,
        "due": 2,
        "oldest_due_at": now - 900,
        "oldest_due_age_ms": 900,
    }
    assert figures["outbox"]["pending"] == {"alpha": 1}


def _walk(client, url: str) -> tuple[list[dict[str, Any]], int]:
    """Every row of a cursor-paginated list, following `next`; and how many pages it took."""
    rows: list[dict[str, Any]] = []
    pages = 0
    while url:
        body = client.get(url).json()
        assert set(body) == {"next", "previous", "results"}, body
        rows += body["results"]
        pages += 1
        url = body["next"]
    return rows, pages


def test_the_jobs_list_is_a_cursor_page_by_id(install, api, owner):
    ext = make_ext("alpha")
    for name in ("e", "c", "a", "d", "b"):
        add_job(ext, Job(name, every_seconds=60, action=lambda ctx, run: None))
    install(ext)

    client = api(owner)

    rows, pages = _walk(client, "/v1/jobs?limit=2")

    assert [row["id"] for row in rows] == [f"ext:alpha:{name}" for name in "abcde"]
    assert pages == 3
    second = client.get(client.get("/v1/jobs?limit=2").json()["next"]).json()
    first = client.get(second["previous"]).json()
    assert [row["id"] for row in first["results"]] == ["ext:alpha:a", "ext:alpha:b"]


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "limit=abc", "limit="])
def test_a_jobs_list_limit_out_of_bounds_is_a_400(api, owner, query):
    response = api(owner).get(f"/v1/jobs?{query}")
    assert response.status_code == 400
    assert "limit" in response.json()["error"]["details"]
