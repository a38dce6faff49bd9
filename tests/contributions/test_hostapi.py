"""The host API (`ctx.host`): grant gates, the same services as the HTTP API, audit, watch."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import connection
from django.db.models import F

from conversations.models import Conversation, Run, Submission
from core import clock
from core.models import AuditEntry, LifecycleEvent
from extensions_host.contributions.services import hostapi
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import deadlines, extension_stop
from extensions_host.runtime.current import Frame
from extensions_host.sdk import (
    AdmissionError,
    Extension,
    ExtensionStop,
    NotReady,
    Route,
    StateError,
)
from extensions_host.surfaces.models import AmbientSurface, Interaction
from extensions_host.surfaces.selectors import ambient_visible

from .exts import ALL, ctx_of, make_host_ext, make_routes_ext


@pytest.mark.parametrize(
    ("call", "grant"),
    [
        (lambda host: host.conversations.create(), "send"),
        (lambda host: host.conversations.submit("c1", "hi"), "send"),
        (lambda host: host.conversations.list(), "host"),
        (lambda host: host.conversations.meta("c1"), "host"),
        (lambda host: host.conversations.watch("c1", 0), "host"),
        (lambda host: host.users.list(), "host"),
        (lambda host: host.users.get("owner"), "host"),
        (lambda host: host.access.access_of({"user": "owner"}, {"owner": "owner"}), "host"),
        (lambda host: host.identity.acting_user("c1"), "host"),
        (lambda host: host.interactions, "attention"),
        (lambda host: host.ambient, "attention"),
    ],
)
def test_a_host_api_call_without_its_grant_raises_admission_closed_naming_it(
    install, conversation, call, grant
):
    install(make_host_ext("bare", grants={"state"}))
    conversation("c1")
    with pytest.raises(AdmissionError) as raised:
        call(ctx_of("bare").host)
    assert raised.value.kind == "closed"
    assert raised.value.message == f"Extension is not granted {grant}"
    assert not AuditEntry.objects.filter(actor="ext:bare").exists()
    assert Conversation.objects.count() == 1


def test_create_runs_the_conversation_service_and_is_audited(install, owner):
    install(make_host_ext("bridge", grants=ALL))
    host = ctx_of("bridge").host
    own = host.conversations.create(name="Inbox")
    theirs = host.conversations.create(owner="owner", sharing="users", id="chan-42")
    assert Conversation.objects.get(pk=own).owner.username == "ext:bridge"
    created = Conversation.objects.get(pk=theirs)
    assert (created.owner_id, created.sharing, created.source) == (owner.pk, "users", "ext:bridge")
    assert host.conversations.create(owner="owner", id="chan-42") == "chan-42"  # idempotent
    assert LifecycleEvent.objects.filter(kind="conversation_created").count() == 2
    audit = AuditEntry.objects.filter(actor="ext:bridge", action="host.conversations.create")
    assert sorted(audit.values_list("target", flat=True)) == sorted([own, "chan-42", "chan-42"])
    with pytest.raises(AdmissionError, match="User not found"):
        host.conversations.create(owner="nobody")
    with pytest.raises(AdmissionError, match="Conversation id is taken") as taken:
        host.conversations.create(id="chan-42")  # another owner's id
    assert taken.value.kind == "conflict"


def test_create_inside_a_frame_commits_or_rolls_back_with_it(install, owner):
    install(make_host_ext("bridge", grants=ALL))
    ctx = ctx_of("bridge")

    def create_then_fail(ctx):
        ctx.host.conversations.create(id="doomed")
        raise StateError("conflict", "no")

    with pytest.raises(StateError):
        ctx.transact(create_then_fail)
    assert not Conversation.objects.filter(pk="doomed").exists()
    assert ctx.transact(lambda ctx: ctx.host.conversations.create(id="kept")) == "kept"
    assert Conversation.objects.filter(pk="kept").exists()


def test_submit_admits_like_the_api_as_the_owner_by_default(install, owner, member, conversation):
    install(make_host_ext("bridge", grants=ALL))
    conversation("c1")
    host = ctx_of("bridge").host
    first = host.conversations.submit("c1", "hello", request_id="msg-1")
    assert first["idempotent"] is False
    assert first["origin"]["kind"] == "user"
    submission = Submission.objects.get(pk=first["id"])
    assert submission.origin_user_id == owner.pk
    again = host.conversations.submit("c1", "hello", request_id="msg-1")
    assert (again["id"], again["idempotent"]) == (first["id"], True)
    with pytest.raises(AdmissionError) as conflict:
        host.conversations.submit("c1", "other", request_id="msg-1")
    assert conflict.value.kind == "conflict"
    as_member = host.conversations.submit("c1", [{"type": "text", "text": "hi"}], user="member")
    assert Submission.objects.get(pk=as_member["id"]).origin_user_id == member.pk
    Conversation.objects.filter(pk="c1").update(archived=True)
    with pytest.raises(AdmissionError) as closed:
        host.conversations.submit("c1", "late")
    assert closed.value.kind == "closed"
    with pytest.raises(AdmissionError, match="Conversation not found"):
        host.conversations.submit("missing", "x")


def test_submit_rejecting_on_a_busy_conversation_is_not_ready_inside_and_outside_a_frame(
    install, conversation
):
    install(make_host_ext("bridge", grants=ALL))
    conversation("c1")
    Run.objects.create(
        conversation_id="c1", status="claimed", claimed_at=clock.now(), lease_expires_at=clock.now()
    )
    ctx = ctx_of("bridge")

    outside = ctx.host.conversations.submit("c1", "hi", when_busy="reject")
    inside = ctx.transact(lambda ctx: ctx.host.conversations.submit("c1", "hi", when_busy="reject"))

    assert outside == inside == NotReady()
    assert not Submission.objects.exists()
    queued = ctx.host.conversations.submit("c1", "hi")  # the default queues it for the next run
    assert queued["status"] == "queued"


def test_create_and_submit_are_bounded_by_the_per_extension_rate(install, settings, owner):
    settings.HOST_SEND_RATE = "2/min"
    cache.clear()
    install(make_host_ext("chatty", grants=ALL))
    host = ctx_of("chatty").host
    cid = host.conversations.create()
    host.conversations.submit(cid, "one")
    with pytest.raises(AdmissionError) as throttled:
        host.conversations.submit(cid, "two")
    assert throttled.value.kind == "throttled"


def test_list_meta_users_access_identity(install, owner, member, conversation):
    install(make_host_ext("bridge", grants=ALL))
    conversation("c1")
    conversation("c2", who=member, sharing="users")
    Conversation.objects.filter(pk="c2").update(archived=True)
    host = ctx_of("bridge").host
    assert [c["id"] for c in host.conversations.list(owner="owner")] == ["c1"]
    assert [c["id"] for c in host.conversations.list(archived=True)] == ["c2"]
    meta = host.conversations.meta("c1")
    assert (meta["id"], meta["owner"]["username"], meta["busy"]) == ("c1", "owner", False)
    assert [u["username"] for u in host.users.list()] == ["member", "owner"]  # no ext: users
    assert host.users.get("member")["email"] == ""
    assert host.users.get("ext:bridge") is None
    access = host.access.access_of
    assert access({"user": "member"}, {"owner": "owner", "sharing": "users"}) == "read"
    assert access({"user": "member"}, {"owner": "owner", "sharing": "private"}) == "none"
    assert access("owner", {"owner": "owner"}) == "owner"
    # the extension's own user signs in nowhere, yet owns what its extension created
    assert access("ext:bridge", {"owner": "ext:bridge"}) == "owner"
    assert access({"user": None}, {"owner": "owner", "sharing": "public"}) == "read"
    assert host.identity.acting_user("c2") == "member"
    assert host.identity.acting_user("nope") is None
    actions = set(AuditEntry.objects.filter(actor="ext:bridge").values_list("action", flat=True))
    assert actions == {
        "host.conversations.list",
        "host.conversations.meta",
        "host.users.list",
        "host.users.get",
        "host.access.access_of",
        "host.identity.acting_user",
    }


@pytest.mark.parametrize("limit", [0, hostapi.LIST_MAX + 1, True, "5", 2.0])
def test_a_conversations_list_limit_out_of_bounds_is_invalid_and_audits_nothing(
    install, conversation, limit
):
    install(make_host_ext("bridge", grants=ALL))
    conversation("c1")
    host = ctx_of("bridge").host

    with pytest.raises(AdmissionError) as refused:
        host.conversations.list(limit=limit)

    assert (refused.value.kind, str(refused.value)) == ("invalid", hostapi.MSG_LIST_LIMIT)
    assert not AuditEntry.objects.filter(actor="ext:bridge").exists()


def test_a_conversations_list_limit_keeps_the_newest_activity(install, conversation, fake_clock):
    install(make_host_ext("bridge", grants=ALL))
    for cid in ("c1", "c2", "c3"):
        conversation(cid)
        fake_clock.advance(seconds=1)
    Conversation.objects.filter(pk="c1").update(last_activity_at=clock.now())  # newest again
    host = ctx_of("bridge").host

    assert [c["id"] for c in host.conversations.list(limit=1)] == ["c1"]
    assert [c["id"] for c in host.conversations.list(limit=2)] == ["c1", "c3"]
    assert len(host.conversations.list(limit=hostapi.LIST_MAX)) == 3


APPROVAL = {"call_id": "q1", "kind": "approval", "prompt": "Deploy?"}
STATUS = {"key": "status", "place": "header", "body": "deploying"}


def make_surfaces_ext(
    ext_id: str = "bridge", *, grants: set[str], routes: list[Route] | None = None
) -> Extension:
    """An extension declaring an `approval` interaction kind and a `status` ambient key."""
    return Extension(
        id=ext_id,
        version="1.0.0",
        grants=grants,
        interaction_kinds=("approval",),
        ambient_kinds=("status",),
        routes=routes or [],
    )


def test_a_route_seeds_an_interaction_and_sets_an_ambient_surface_through_the_host_api(
    install, api, member, conversation
):
    def ask(ctx, request):
        seeded = ctx.host.interactions.seed("c1", APPROVAL)
        ctx.host.ambient.set("c1", STATUS)
        return {"seeded": seeded}

    route = Route("POST", "ask", handler=ask)
    install(make_surfaces_ext(grants={"routes", "attention"}, routes=[route]))
    version = conversation("c1").version

    response = api(member).post("/v1/ext/bridge/ask")

    assert response.status_code == 200, response.content
    assert response.json() == {"seeded": True}
    assert RosterEntry.objects.get(pk="bridge").status == ExtensionStatus.RUNNING
    assert Interaction.objects.get().status == "pending"
    assert [s["body"] for s in ambient_visible(conversation_id="c1")] == ["deploying"]
    assert Conversation.objects.get(pk="c1").version > version  # watchers hear of it


def test_outside_a_frame_each_interaction_and_ambient_call_commits_on_its_own(
    install, conversation
):
    install(make_surfaces_ext(grants={"attention"}))
    conversation("c1")
    host = ctx_of("bridge").host  # a worker's or job's context: no frame

    assert host.interactions.seed("c1", APPROVAL) is True
    with pytest.raises(StateError) as undeclared:
        host.interactions.seed("c1", APPROVAL | {"call_id": "q2", "kind": "poll"})
    assert host.interactions.answer("c1", "q1", "yes") is True
    assert host.interactions.settle("c1", "q1", "cancelled") is False  # no longer pending
    host.ambient.set("c1", STATUS)
    host.ambient.clear("c1", "status")

    assert undeclared.value.kind == "bound"  # refused, without a stop or undoing the seed
    assert host.interactions.snapshot("c1", "q1")["status"] == "answered"
    assert list(Interaction.objects.values_list("call_id", flat=True)) == ["q1"]
    assert AmbientSurface.objects.get().cleared is True
    assert RosterEntry.objects.get(pk="bridge").status == ExtensionStatus.RUNNING


def test_inside_a_frame_interaction_and_ambient_calls_roll_back_with_it(install, conversation):
    install(make_surfaces_ext(grants={"attention"}))
    conversation("c1")

    def seed_then_fail(ctx):
        ctx.host.interactions.seed("c1", APPROVAL)
        ctx.host.ambient.set("c1", STATUS)
        raise StateError("conflict", "no")

    with pytest.raises(StateError):
        ctx_of("bridge").transact(seed_then_fail)

    assert not Interaction.objects.exists()
    assert not AmbientSurface.objects.exists()
    assert not AuditEntry.objects.filter(actor="ext:bridge").exists()


def test_a_stopped_extensions_interaction_call_outside_a_frame_writes_nothing(
    install, conversation
):
    install(make_surfaces_ext(grants={"attention"}))
    conversation("c1")
    host = ctx_of("bridge").host
    extension_stop(extension_id="bridge", hook="test", reason="stopped by the test")

    with pytest.raises(ExtensionStop):
        host.interactions.seed("c1", APPROVAL)

    assert not Interaction.objects.exists()


def test_interaction_and_ambient_calls_are_attributed_to_the_extension_in_the_audit_log(
    install, conversation
):
    install(make_surfaces_ext(grants={"attention"}))
    conversation("c1")
    ctx = ctx_of("bridge")
    host = ctx.host

    host.interactions.seed("c1", APPROVAL)
    host.interactions.snapshot("c1", "q1")
    host.interactions.answer("c1", "q1", "yes")
    host.interactions.settle("c1", "q1", "skipped")
    ctx.transact(lambda ctx: ctx.host.ambient.set("c1", STATUS))  # inside a frame too
    host.ambient.clear("c1", "status")
    assert host.interactions.snapshot("c1", "q\x00") is None  # an id no record can have

    audit = AuditEntry.objects.filter(actor="ext:bridge").order_by("id")
    assert [(a.action, a.target, a.detail) for a in audit] == [
        ("host.interactions.seed", "c1", {"call_id": "q1", "seeded": True}),
        ("host.interactions.snapshot", "c1", {"call_id": "q1"}),
        ("host.interactions.answer", "c1", {"call_id": "q1", "answered": True}),
        (
            "host.interactions.settle",
            "c1",
            {"call_id": "q1", "status": "skipped", "settled": False},
        ),
        ("host.ambient.set", "c1", {"key": "status"}),
        ("host.ambient.clear", "c1", {"key": "status"}),
        ("host.interactions.snapshot", "c1", {"call_id": ""}),
    ]


def test_watch_refuses_to_run_inside_a_frame(install, conversation):
    install(make_host_ext("bridge", grants=ALL))
    conversation("c1")
    with pytest.raises(StateError, match="watch cannot run inside a transaction"):
        ctx_of("bridge").transact(lambda ctx: ctx.host.conversations.watch("c1", 0))


def test_watch_of_a_quiet_conversation_ends_at_its_timeout(install, conversation, settings):
    settings.HOST_WATCH_POLL_SECONDS = 0.01
    install(make_host_ext("bridge", grants=ALL))
    version = conversation("c1").version
    started = time.monotonic()
    views = list(ctx_of("bridge").host.conversations.watch("c1", version, timeout_s=0.05))
    assert views == []
    assert time.monotonic() - started < 1


@pytest.mark.django_db(transaction=True)
def test_watch_yields_a_changed_view_to_a_worker_within_one_second_of_a_submission(
    install, api, owner, conversation
):
    install(make_host_ext("bridge", grants=ALL))
    version = conversation("c1").version
    seen: list[tuple[float, dict]] = []
    watching = threading.Event()
    errors: list[BaseException] = []

    def worker() -> None:
        # an extension worker: its own thread, its own database connection, outside any frame
        try:
            stream = ctx_of("bridge").host.conversations.watch("c1", version, timeout_s=5)
            watching.set()
            for view in stream:
                seen.append((time.monotonic(), view))
                break
        except BaseException as exc:
            errors.append(exc)
            watching.set()
        finally:
            connection.close()

    thread = threading.Thread(target=worker)
    thread.start()
    assert watching.wait(5)
    submitted_at = time.monotonic()
    response = api(owner).post(
        "/v1/conversations/c1/submissions",
        {"parts": [{"type": "text", "text": "ping"}]},
        format="json",
    )
    assert response.status_code == 201
    thread.join(5)
    assert not thread.is_alive()
    assert errors == []
    [(at, view)] = seen
    assert at - submitted_at < 1.0
    assert view["id"] == "c1"
    assert view["version"] > version
    assert view["head"] is not None


def watching_route(cid: str, since: int, timeout_s: float):
    """A route handler (a channel bridge's long poll) that watches `cid` and reports what it saw
    and how long the watch took."""

    def handler(ctx, request):
        started = time.monotonic()
        views = list(ctx.host.conversations.watch(cid, since, timeout_s=timeout_s))
        return {"versions": [v["version"] for v in views], "took": time.monotonic() - started}

    return handler


def test_watch_in_a_route_ends_before_the_route_deadline_and_the_route_answers(
    install, api, member, conversation, settings
):
    settings.HOST_WATCH_POLL_SECONDS = 0.01
    version = conversation("c1").version
    deadline = 0.5
    handler = watching_route("c1", version, timeout_s=2)  # its own timeout outlives the route
    install(make_routes_ext("wat", grants={"routes", "host"}, handler=handler, deadline_s=deadline))
    started = time.monotonic()
    response = api(member).get("/v1/ext/wat/me")
    assert response.status_code == 200, response.content
    assert response.json()["versions"] == []
    took = response.json()["took"]
    assert deadline - deadlines.NESTED_MARGIN_SECONDS - 0.1 <= took < deadline
    assert time.monotonic() - started < 2  # not its own timeout
    assert RosterEntry.objects.get(pk="wat").status == ExtensionStatus.RUNNING


def test_watch_in_a_route_still_yields_a_change_arriving_before_the_deadline(
    install, api, member, conversation, settings, monkeypatch
):
    settings.HOST_WATCH_POLL_SECONDS = 0.01
    version = conversation("c1").version
    real_sleep = time.sleep
    polls: list[float] = []

    def sleep_then_change(seconds: float) -> None:
        # a submission lands while the watch waits (its first poll)
        if not polls:
            Conversation.objects.filter(pk="c1").update(version=F("version") + 1)
        polls.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(hostapi.time, "sleep", sleep_then_change)
    handler = watching_route("c1", version, timeout_s=2)
    install(make_routes_ext("wat", grants={"routes", "host"}, handler=handler, deadline_s=0.4))
    response = api(member).get("/v1/ext/wat/me")
    assert response.status_code == 200, response.content
    assert response.json()["versions"] == [version + 1]
    assert response.json()["took"] < 0.4
    assert RosterEntry.objects.get(pk="wat").status == ExtensionStatus.RUNNING


def test_the_deadline_left_is_known_only_inside_a_bounded_call_and_never_extended():
    assert deadlines.seconds_left() is None
    marker = Frame(
        extension_id="x",
        revision="r",
        hook="h",
        mode="read",
        grants=frozenset(),
        quotas={},
        deadline_s=1,
    )
    with deadlines.alarm(marker, 1):
        outer = deadlines.seconds_left()
        assert outer is not None and 0 < outer <= 1
        with deadlines.alarm(marker, 5):  # a nested, longer deadline: the outer one still holds
            inner = deadlines.seconds_left()
            assert inner is not None and inner <= 1
    marker.open = False
    assert deadlines.seconds_left() is None


def test_inside_another_extensions_frame_a_host_call_keeps_its_own_extensions_grants(
    install, conversation
):
    install(make_host_ext("bare", grants={"state"}), make_host_ext("bridge", grants=ALL))
    conversation("c1")
    bare = ctx_of("bare").host
    refused = []

    def borrow(ctx):
        try:
            bare.users.list()
        except AdmissionError as exc:
            refused.append(exc.message)

    ctx_of("bridge").update(borrow)
    assert refused == ["Extension is not granted host"]
    assert not AuditEntry.objects.filter(actor="ext:bare").exists()


def test_a_deactivated_user_has_no_access_and_the_service_user_is_no_person(install, owner, member):
    from core.auth import SERVICE_USERNAME

    install(make_host_ext("bridge", grants=ALL))
    host = ctx_of("bridge").host
    shared = {"owner": "owner", "sharing": "users"}
    assert host.access.access_of({"user": "member"}, shared) == "read"
    member.is_active = False
    member.save(update_fields=["is_active"])
    assert host.access.access_of({"user": "member"}, shared) == "none"
    assert host.access.access_of("member", {"owner": "member"}) == "none"
    get_user_model().objects.get_or_create(username=SERVICE_USERNAME)
    assert SERVICE_USERNAME not in [u["username"] for u in host.users.list()]
    assert host.users.get(SERVICE_USERNAME) is None
