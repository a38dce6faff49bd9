"""The host API (`ctx.host`), its finer rules: watch's bounds and stream, access_of's inputs,
acting_user's bound, and what the audit log records for each call (spec 05, 04)."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache
from django.db.models import F

from conversations.models import Conversation
from conversations.selectors import conversation_view
from core.auth import user_principal
from core.models import AuditEntry
from extensions_host.contributions.services import hostapi
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.sdk import (
    AdmissionError,
    AmbientRecord,
    Caller,
    Extension,
    InteractionRecord,
    StateError,
)

from .exts import ALL, ctx_of, make_host_ext, make_routes_ext


def host_of(install, grants: set[str] = ALL):
    install(make_host_ext("bridge", grants=grants))
    return ctx_of("bridge").host


def bump(cid: str, by: int = 1) -> int:
    Conversation.objects.filter(pk=cid).update(version=F("version") + by)
    return Conversation.objects.get(pk=cid).version


def audited(action: str) -> list[tuple[str, dict]]:
    entries = AuditEntry.objects.filter(actor="ext:bridge", action=f"host.{action}").order_by("id")
    return [(entry.target, entry.detail) for entry in entries]


# --- watch: its arguments -----------------------------------------------------------------------


@pytest.mark.parametrize("timeout_s", [0, -1, 300.001, 301, True, "5", None])
def test_a_watch_timeout_outside_0_to_300_seconds_or_not_a_number_is_refused_as_invalid(
    install, conversation, timeout_s
):
    host = host_of(install)
    conversation("c1")
    with pytest.raises(AdmissionError) as refused:
        host.conversations.watch("c1", 0, timeout_s=timeout_s)
    assert (refused.value.kind, refused.value.message) == ("invalid", hostapi.MSG_TIMEOUT)
    assert audited("conversations.watch") == []


@pytest.mark.parametrize("timeout_s", [300, 300.0, 0.001])
def test_a_watch_timeout_within_0_to_300_seconds_is_accepted(install, conversation, timeout_s):
    host = host_of(install)
    conversation("c1")
    stream = host.conversations.watch("c1", 0, timeout_s=timeout_s)  # not iterated: no waiting
    assert iter(stream) is stream


@pytest.mark.parametrize("since_version", ["x", "3", 1.5, None, True])
def test_a_watch_since_version_that_is_not_an_integer_is_refused_as_invalid(
    install, conversation, since_version
):
    host = host_of(install)
    conversation("c1")
    with pytest.raises(AdmissionError) as refused:
        host.conversations.watch("c1", since_version, timeout_s=1)
    assert (refused.value.kind, refused.value.message) == ("invalid", hostapi.MSG_SINCE_VERSION)
    assert audited("conversations.watch") == []


def test_watching_a_missing_conversation_is_refused_when_called_not_first_iterated(install):
    host = host_of(install)
    with pytest.raises(AdmissionError) as refused:
        host.conversations.watch("missing", 0, timeout_s=1)
    assert (refused.value.kind, refused.value.message) == ("invalid", "Conversation not found")
    assert audited("conversations.watch") == []


def test_a_watch_is_audited_with_the_version_it_starts_from(install, conversation):
    host = host_of(install)
    conversation("c1")
    host.conversations.watch("c1", 7, timeout_s=1)
    assert audited("conversations.watch") == [("c1", {"since_version": 7})]


# --- watch: what it yields ----------------------------------------------------------------------


def test_a_watch_yields_only_versions_past_since_version(install, conversation, settings):
    settings.HOST_WATCH_POLL_SECONDS = 0.01
    host = host_of(install)
    conversation("c1")
    current = bump("c1", 3)
    assert current > 0

    quiet = list(host.conversations.watch("c1", current, timeout_s=0.05))
    behind = list(host.conversations.watch("c1", current - 1, timeout_s=0.05))

    assert quiet == []
    assert [view["version"] for view in behind] == [current]  # once, not once per poll
    assert behind[0]["id"] == "c1"


def test_a_watch_never_yields_the_same_version_twice_when_it_moves_while_being_read(
    install, conversation, settings, monkeypatch
):
    """The version read to notice a change may be older than the view then read: the view's
    version is the one seen, so the next poll does not yield that view again."""
    settings.HOST_WATCH_POLL_SECONDS = 0.01
    host = host_of(install)
    since = conversation("c1").version
    calls: list[str] = []

    def view_after_another_change(**kwargs):
        calls.append(kwargs["conversation_id"])
        if len(calls) == 2:  # the first view the stream reads (the first checks existence)
            bump("c1")
        return conversation_view(**kwargs)

    monkeypatch.setattr(
        hostapi.conversation_selectors, "conversation_view", view_after_another_change
    )
    stream = host.conversations.watch("c1", since, timeout_s=0.1)
    bump("c1")
    assert [view["version"] for view in stream] == [since + 2]


def test_a_watch_ends_when_its_conversation_is_deleted_meanwhile(
    install, conversation, settings, monkeypatch
):
    settings.HOST_WATCH_POLL_SECONDS = 0.01
    host = host_of(install)
    since = conversation("c1").version
    real_sleep = time.sleep
    polls: list[float] = []

    def sleep_then_delete(seconds: float) -> None:
        if not polls:
            Conversation.objects.filter(pk="c1").delete()
        polls.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(hostapi.time, "sleep", sleep_then_delete)
    views = list(host.conversations.watch("c1", since, timeout_s=5))
    assert views == []
    assert len(polls) == 1  # it noticed at the next poll, instead of polling until its timeout


def test_a_watch_never_sleeps_past_its_own_timeout(install, conversation, settings):
    settings.HOST_WATCH_POLL_SECONDS = 5  # a poll interval far longer than the timeout
    host = host_of(install)
    since = conversation("c1").version
    started = time.monotonic()
    assert list(host.conversations.watch("c1", since, timeout_s=0.05)) == []
    assert time.monotonic() - started < 1


def test_meta_of_a_missing_conversation_is_an_admission_error(install):
    host = host_of(install)
    with pytest.raises(AdmissionError) as refused:
        host.conversations.meta("missing")
    assert (refused.value.kind, refused.value.message) == ("invalid", "Conversation not found")


# --- access_of -----------------------------------------------------------------------------------


@pytest.mark.parametrize("resource", [["owner", "users"], "owner", None])
def test_access_of_a_resource_that_is_not_a_mapping_is_refused_as_invalid(install, owner, resource):
    host = host_of(install)
    with pytest.raises(AdmissionError) as refused:
        host.access.access_of("owner", resource)
    assert refused.value.kind == "invalid"


@pytest.mark.parametrize("sharing", ["everyone", "", None, "PUBLIC"])
def test_access_of_an_unknown_sharing_is_refused_as_invalid(install, owner, member, sharing):
    host = host_of(install)
    with pytest.raises(AdmissionError) as refused:
        host.access.access_of("member", {"owner": "owner", "sharing": sharing})
    assert (refused.value.kind, refused.value.message) == ("invalid", "Sharing is invalid")
    assert audited("access.access_of") == []


def test_access_of_a_resource_without_sharing_reads_as_private(install, owner, member):
    host = host_of(install)
    assert host.access.access_of("member", {"owner": "owner"}) == "none"
    assert host.access.access_of(None, {"owner": "owner"}) == "none"
    assert host.access.access_of("owner", {"owner": "owner"}) == "owner"


def test_access_of_takes_a_principal_a_caller_a_mapping_or_a_username(install, owner, member):
    host = host_of(install)
    shared = {"owner": "owner", "sharing": "users"}
    as_principal = user_principal(member, "token")
    for who in (as_principal, Caller(username="member"), {"user": "member"}, "member"):
        assert host.access.access_of(who, shared) == "read", who
    assert host.access.access_of(Caller(username="owner"), shared) == "owner"
    assert host.access.access_of(user_principal(owner, "token"), shared) == "owner"


def test_access_of_an_unknown_or_anonymous_principal_sees_only_public(install, owner):
    host = host_of(install)
    for who in ("nobody", {"user": ""}, {}, 42, Caller(username="nobody")):
        assert host.access.access_of(who, {"owner": "owner", "sharing": "users"}) == "none"
        assert host.access.access_of(who, {"owner": "owner", "sharing": "public"}) == "read"


# --- identity ------------------------------------------------------------------------------------


def test_acting_user_answers_for_a_conversation_id_of_the_longest_allowed_length(
    install, owner, conversation
):
    host = host_of(install)
    longest = "c" * 64
    conversation(longest)
    assert host.identity.acting_user(longest) == "owner"
    assert host.identity.acting_user("c" * 65) is None
    assert host.identity.acting_user(None) is None


# --- the audit log -------------------------------------------------------------------------------


def make_surfaces_ext(grants: frozenset[str] | set[str] = frozenset({"attention"})) -> Extension:
    return Extension(
        id="bridge",
        version="1.0.0",
        grants=set(grants),
        interaction_kinds=("approval",),
        ambient_kinds=("status",),
    )


def test_overlong_audited_values_are_cut_to_the_audit_logs_bound(install, owner, conversation):
    install(make_surfaces_ext(grants={"attention", "host"}))
    conversation("c1")
    host = ctx_of("bridge").host
    long_id = "x" * 300
    assert host.identity.acting_user(long_id) is None
    assert host.users.get(long_id) is None
    assert host.interactions.snapshot("c1", long_id) is None
    assert audited("identity.acting_user") == [(long_id[:256], {})]
    assert audited("users.get") == [(long_id[:256], {})]
    assert audited("interactions.snapshot") == [("c1", {"call_id": long_id[:256]})]


def test_interaction_and_ambient_calls_given_sdk_models_are_audited_with_their_ids(
    install, conversation
):
    install(make_surfaces_ext())
    conversation("c1")
    host = ctx_of("bridge").host

    host.interactions.seed("c1", InteractionRecord(call_id="q1", kind="approval", prompt="Go?"))
    host.ambient.set("c1", AmbientRecord(key="status", place="header", body="deploying"))

    assert audited("interactions.seed") == [("c1", {"call_id": "q1", "seeded": True})]
    assert audited("ambient.set") == [("c1", {"key": "status"})]


def test_interaction_calls_that_change_nothing_are_audited_as_such(install, conversation):
    install(make_surfaces_ext())
    conversation("c1")
    host = ctx_of("bridge").host
    record = {"call_id": "q1", "kind": "approval", "prompt": "Deploy?"}

    assert host.interactions.seed("c1", record) is True
    assert host.interactions.answer("c1", "q1", "yes") is True
    assert host.interactions.answer("c1", "q1", "no") is False  # already answered
    assert host.interactions.seed("c1", record) is False  # an answer is never resurrected
    assert host.interactions.settle("c1", "q1", "cancelled") is False  # no longer pending

    assert [detail["seeded"] for _, detail in audited("interactions.seed")] == [True, False]
    assert [detail["answered"] for _, detail in audited("interactions.answer")] == [True, False]
    assert audited("interactions.settle") == [
        ("c1", {"call_id": "q1", "status": "cancelled", "settled": False})
    ]


def test_a_refused_interaction_or_ambient_write_is_not_audited(install, conversation):
    install(make_surfaces_ext())
    conversation("c1")
    host = ctx_of("bridge").host

    with pytest.raises(StateError):
        host.interactions.seed("c1", {"call_id": "q1", "kind": "poll", "prompt": "Deploy?"})
    with pytest.raises(StateError):
        host.ambient.set("c1", {"key": "progress", "place": "header", "body": "50%"})
    with pytest.raises(StateError):
        host.ambient.clear("c1", "progress")

    assert not AuditEntry.objects.filter(actor="ext:bridge").exists()


# --- ids and usernames no record can have ----------------------------------------------------
# checked before any query: on PostgreSQL a NUL would be a driver error, taken as the calling
# extension's defect


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda host: host.identity.acting_user("c\x00"), None),
        (lambda host: host.users.get("owner\x00"), None),
        (lambda host: host.access.access_of("owner\x00", {"owner": "owner"}), "none"),
        (lambda host: host.access.access_of("member", {"owner": "own\x00er"}), "none"),
        (lambda host: host.conversations.list(owner="own\x00er"), []),
    ],
    ids=["acting_user", "users.get", "access_of-principal", "access_of-owner", "list-owner"],
)
def test_a_nul_in_an_id_or_username_answers_nobody(
    install, owner, member, conversation, call, expected
):
    host = host_of(install)
    conversation("c1")
    assert call(host) == expected


@pytest.mark.parametrize(
    "call",
    [
        lambda host: host.conversations.create(owner="own\x00er"),
        lambda host: host.conversations.submit("c1", "hi", user="own\x00er"),
    ],
    ids=["create-owner", "submit-user"],
)
def test_a_nul_in_a_username_to_act_as_is_an_unknown_user(install, owner, conversation, call):
    host = host_of(install)
    conversation("c1")
    with pytest.raises(AdmissionError) as refused:
        call(host)
    assert (refused.value.kind, refused.value.message) == ("invalid", hostapi.MSG_USER_UNKNOWN)
    assert Conversation.objects.count() == 1


def test_a_route_relaying_an_id_with_a_nul_to_acting_user_answers_and_keeps_running(
    install, api, member, conversation
):
    def who(ctx, request):
        return {"who": ctx.host.identity.acting_user(request.GET.get("cid", ""))}

    install(make_routes_ext("wat", grants={"routes", "host"}, handler=who))
    conversation("c1")
    response = api(member).get("/v1/ext/wat/me?cid=c%00")
    assert RosterEntry.objects.get(pk="wat").status == ExtensionStatus.RUNNING
    assert (response.status_code, response.json()) == (200, {"who": None})


def test_a_refused_create_or_submit_is_not_counted_against_the_send_rate(install, settings, owner):
    settings.HOST_SEND_RATE = "2/min"
    cache.clear()
    host = host_of(install)

    with pytest.raises(AdmissionError):
        host.conversations.create(sharing="everyone")
    cid = host.conversations.create()
    with pytest.raises(AdmissionError):
        host.conversations.submit(cid, [{"type": "image"}])
    host.conversations.submit(cid, "one")
    with pytest.raises(AdmissionError) as throttled:
        host.conversations.submit(cid, "two")

    assert throttled.value.kind == "throttled"
    assert Conversation.objects.count() == 1
