"""Grants waiting for admission are visible (`sync_roster`, `/v1/meta` health, `/metrics`) and
can be admitted without the admin (`manage.py admit_grants`, staff's audited service)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from core.models import AuditEntry

from .conftest import roster
from .exts import make_ext


@pytest.fixture
def waiting(install, settings):
    """`alpha` installed without auto-admission: every grant it requests waits for staff."""
    settings.HOST_AUTO_ADMIT = False
    install(make_ext("alpha", grants={"state", "timers", "commands"}), sync=False)
    return install


def sync() -> str:
    out = StringIO()
    call_command("sync_roster", stdout=out)
    return out.getvalue()


def test_sync_roster_says_which_grants_wait_and_how_to_admit_them(waiting):
    printed = sync()
    assert "installed alpha, waiting for grants: commands, state, timers" in printed
    assert "manage.py admit_grants <extension>" in printed
    # a later sync that changes nothing still says so
    again = sync()
    assert "alpha waiting for grants: commands, state, timers" in again
    assert "manage.py admit_grants" in again


def test_sync_roster_says_nothing_of_grants_when_none_wait(install):
    install(make_ext("alpha", grants={"state"}), sync=False)  # the test settings auto-admit
    printed = sync()
    assert "installed alpha\n" in printed
    assert "waiting" not in printed
    assert "admit_grants" not in printed


def test_admit_grants_admits_every_requested_grant_by_default_audited(waiting):
    sync()
    out = StringIO()
    call_command("admit_grants", "alpha", "--actor", "deploy", stdout=out)
    assert out.getvalue().strip() == "alpha admitted grants: commands, state, timers"
    row = roster("alpha")
    assert (row.admitted_grants, row.pending_grants) == (["commands", "state", "timers"], [])
    entry = AuditEntry.objects.get(action="extension_grants_admitted", target="alpha")
    assert entry.actor == "deploy"
    assert entry.detail == {"before": [], "after": ["commands", "state", "timers"]}
    assert "waiting" not in sync()


def test_admit_grants_adds_the_named_grants_to_those_already_admitted(waiting):
    sync()
    call_command("admit_grants", "alpha", "--grant", "state", stdout=StringIO())
    out = StringIO()
    call_command("admit_grants", "alpha", "--grant", "timers", stdout=out)
    assert out.getvalue().strip() == "alpha admitted grants: state, timers; still waiting: commands"
    assert roster("alpha").admitted_grants == ["state", "timers"]


def test_admit_grants_refuses_an_unknown_extension_or_a_grant_not_requested(waiting):
    sync()
    with pytest.raises(CommandError, match=r"Unknown extension 'ghost' \(in the roster: alpha\)"):
        call_command("admit_grants", "ghost", stdout=StringIO())
    with pytest.raises(
        CommandError,
        match=r"alpha does not request send \(it requests: commands, state, timers\)",
    ):
        call_command("admit_grants", "alpha", "--grant", "state", "--grant", "send")
    assert roster("alpha").admitted_grants == []  # nothing admitted by a refused call


def test_meta_health_and_metrics_show_the_waiting_grants(waiting, api, member):
    sync()
    body = api(member).get("/v1/meta").json()
    assert body["health"]["status"] == "degraded"
    [alpha] = body["extensions"]
    assert alpha["health"] == {
        "status": "degraded",
        "detail": "waiting for grants: commands, state, timers (staff admit them in the admin "
        "or with manage.py admit_grants alpha)",
    }
    metrics = APIClient().get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert "hyphae_extensions_pending_grants 1.0" in metrics

    call_command("admit_grants", "alpha", stdout=StringIO())
    body = api(member).get("/v1/meta").json()
    assert body["health"] == {"status": "ok"}
    metrics = APIClient().get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert "hyphae_extensions_pending_grants 0.0" in metrics
