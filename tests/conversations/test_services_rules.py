"""Rules of the conversation services that a mutation sweep found unprotected: claim and lease
bounds, idempotency keys, admission and withdrawal, settling, forks and content checks."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction

from conversations import services
from conversations.models import Conversation, Entry, Run, Submission
from conversations.services import Origin
from conversations.services.common import content_size_check
from core import clock
from core.auth import user_principal
from core.errors import HostError

from .conftest import text

TEXT = text("answer")

pytestmark = pytest.mark.django_db


def version(cid: str = "c1") -> int:
    return Conversation.objects.get(pk=cid).version


# ── claims ───────────────────────────────────────────────────────────────────────────────────


def test_a_claim_key_of_128_characters_is_accepted_and_one_of_129_is_invalid(kit):
    kit.conversation()
    kit.submit()
    with pytest.raises(HostError) as refused:
        services.run_claim(conversation_id="c1", claim_key="k" * 129)
    assert (refused.value.cause, refused.value.details) == (
        "invalid",
        {"claim_key": ["1 to 128 characters."]},
    )
    assert not Run.objects.exists()
    assert kit.claim(claim_key="k" * 128).claim_key == "k" * 128


def test_a_claim_key_the_database_cannot_store_is_invalid(kit):
    kit.conversation()
    kit.submit()
    with pytest.raises(HostError) as refused:
        services.run_claim(conversation_id="c1", claim_key="a\x00b")
    assert (refused.value.cause, list(refused.value.details)) == ("invalid", ["claim_key"])
    assert not Run.objects.exists()


def test_a_claim_replay_returns_the_captured_run_without_capturing_again(kit, monkeypatch):
    kit.conversation()
    kit.submit()
    first = kit.claim(claim_key="k1")
    captures: list[int] = []
    monkeypatch.setattr(
        "conversations.services.runs.run_capture", lambda run: captures.append(run.pk) or {}
    )
    replay = services.run_claim(conversation_id="c1", claim_key="k1")
    assert replay is not None and (replay.run.pk, replay.created) == (first.pk, False)
    assert captures == []
    assert Run.objects.get().capture == first.capture


def test_a_claim_takes_the_oldest_64_inputs_and_leaves_the_rest_queued(kit):
    kit.conversation()
    submitted = [kit.submit(say=str(n)).pk for n in range(65)]
    run = kit.claim()
    assert sorted(run.submissions.values_list("pk", flat=True)) == submitted[:64]
    assert Submission.objects.get(pk=submitted[64]).status == "queued"


def test_a_claim_bumps_the_conversation_version(kit):
    kit.conversation()
    kit.submit()
    before = version()
    kit.claim()
    assert version() > before


# ── heartbeat, steers, entries ───────────────────────────────────────────────────────────────


def released_run(kit, fake_clock, settings) -> Run:
    run = kit.claim()
    fake_clock.advance(seconds=settings.RUN_LEASE_SECONDS + 1)
    assert services.runs_expire_leases() == (1, False)
    return run


@pytest.mark.parametrize(
    "call",
    [
        lambda run: services.run_heartbeat(run_id=run.pk),
        lambda run: services.run_steers_take(run_id=run.pk),
        lambda run: services.entry_append(
            conversation_id=run.conversation_id, run_id=run.pk, role="assistant", content=TEXT
        ),
    ],
    ids=["heartbeat", "steers", "append"],
)
def test_a_released_run_refuses_its_runtime_saying_it_was_released(kit, fake_clock, settings, call):
    kit.conversation()
    kit.submit()
    run = released_run(kit, fake_clock, settings)
    with pytest.raises(HostError) as refused:
        call(run)
    assert (refused.value.cause, refused.value.message) == (
        "conflict",
        "Run was released after its lease expired; claim again",
    )


def test_a_steer_whose_not_before_has_not_come_is_not_taken(kit, fake_clock):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    later = kit.submit(
        say="later", delivery="steer", not_before=clock.now() + dt.timedelta(minutes=1)
    )
    assert services.run_steers_take(run_id=run.pk) == []
    fake_clock.advance(seconds=60)
    assert [s.pk for s in services.run_steers_take(run_id=run.pk)] == [later.pk]


def test_taking_steers_bumps_the_version_and_taking_none_does_not(kit):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    before = version()
    services.run_steers_take(run_id=run.pk)
    assert version() == before
    kit.submit(say="steer", delivery="steer")
    before = version()
    services.run_steers_take(run_id=run.pk)
    assert version() == before + 1


@pytest.mark.parametrize("role", ["user", "extension", "nobody"])
def test_the_runtime_may_append_only_assistant_tool_and_system_entries(kit, role):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    with pytest.raises(HostError) as refused:
        services.entry_append(conversation_id="c1", run_id=run.pk, role=role, content=TEXT)
    assert (refused.value.cause, refused.value.message) == ("invalid", "Role is invalid")
    assert not Entry.objects.filter(run=run).exists()


def test_an_entry_key_reused_with_another_role_is_a_409(kit):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    append = {"conversation_id": "c1", "run_id": run.pk, "content": TEXT, "entry_key": "e1"}
    services.entry_append(role="assistant", **append)
    with pytest.raises(HostError) as refused:
        services.entry_append(role="system", **append)
    assert refused.value.message == "Entry key was already used with different content"
    assert Entry.objects.filter(run=run).count() == 1


def test_an_append_bumps_the_version_and_its_idempotent_retry_does_not(kit):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    before = version()
    kit.answer(run, key="e1")
    assert version() == before + 1
    kit.answer(run, key="e1")
    assert version() == before + 1


# ── leases ───────────────────────────────────────────────────────────────────────────────────


def test_a_lease_sweep_page_releases_the_longest_expired_lease_first(kit, fake_clock, settings):
    for cid in ("late", "early"):
        kit.conversation(cid)
        kit.submit(cid)
    early = kit.claim("early")
    fake_clock.advance(seconds=10)
    late = kit.claim("late")  # the newer conversation row, the later lease
    fake_clock.advance(seconds=settings.RUN_LEASE_SECONDS + 10)
    assert services.runs_expire_leases(limit=1) == (1, True)
    assert Run.objects.get(pk=early.pk).status == "released"
    assert Run.objects.get(pk=late.pk).status == "claimed"


def test_a_claim_key_given_up_by_an_expired_lease_may_claim_another_conversation(
    kit, fake_clock, settings
):
    for cid in ("a", "b"):
        kit.conversation(cid)
        kit.submit(cid)
    kit.claim("a", claim_key="k1")
    fake_clock.advance(seconds=settings.RUN_LEASE_SECONDS + 1)
    services.runs_expire_leases()
    claim = services.run_claim(conversation_id="b", claim_key="k1")
    assert claim is not None and (claim.run.conversation_id, claim.created) == ("b", True)


def test_a_released_lease_wakes_the_echo_runtime_after_commit(
    kit, fake_clock, settings, monkeypatch, django_capture_on_commit_callbacks
):
    from conversations import tasks

    woken: list[str] = []
    monkeypatch.setattr(tasks.echo_sweep, "delay", lambda: woken.append("echo"))
    kit.conversation()
    kit.submit()
    kit.claim()
    settings.AGENT_RUNTIME = "echo"
    fake_clock.advance(seconds=settings.RUN_LEASE_SECONDS + 1)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.runs_expire_leases() == (1, False)
    assert woken == ["echo"]


def test_a_heartbeat_landing_after_the_sweep_read_its_page_keeps_the_run_claimed(
    kit, fake_clock, settings, monkeypatch
):
    """The sweep re-checks the lease under the lock: a heartbeat that committed between its
    read of the due runs and its lock wins."""
    from conversations.services import runs

    kit.conversation()
    kit.submit()
    run = kit.claim()
    fake_clock.advance(seconds=settings.RUN_LEASE_SECONDS + 1)
    lock = runs.conversation_lock

    def heartbeat_first(**kw):
        services.run_heartbeat(run_id=run.pk)
        return lock(**kw)

    monkeypatch.setattr(runs, "conversation_lock", heartbeat_first)
    assert services.runs_expire_leases() == (0, False)
    assert Run.objects.get(pk=run.pk).status == "claimed"
    assert Submission.objects.get().status == "claimed"


# ── admission and withdrawal ─────────────────────────────────────────────────────────────────


def test_a_request_id_of_128_characters_is_admitted_and_one_of_129_is_invalid(kit):
    kit.conversation()
    with pytest.raises(HostError) as refused:
        kit.submit(request_id="r" * 129)
    assert refused.value.details == {"request_id": ["1 to 128 characters."]}
    assert not Submission.objects.exists()
    assert kit.submit(request_id="r" * 128).request_id == "r" * 128


def test_an_extension_correlation_the_database_cannot_store_is_invalid(kit):
    kit.conversation()
    with pytest.raises(HostError) as refused:
        kit.submit(origin=Origin.of_extension("ext", correlation="a\x00b"))
    assert (refused.value.cause, list(refused.value.details)) == ("invalid", ["correlation"])
    assert not Submission.objects.exists()


def test_an_unknown_delivery_is_invalid(kit):
    kit.conversation()
    with pytest.raises(HostError) as refused:
        kit.submit(delivery="later")
    assert (refused.value.cause, refused.value.message) == (
        "invalid",
        "Delivery or when_busy is invalid",
    )
    assert not Submission.objects.exists()


EXT = Origin.of_extension


@pytest.mark.parametrize(
    ("first", "retry"),
    [
        ({}, {"delivery": "steer"}),
        ({}, {"when_busy": "reject"}),
        ({}, {"origin": EXT("ext")}),
        ({"origin": EXT("one")}, {"origin": EXT("two")}),
        ({"origin": EXT("ext", "one")}, {"origin": EXT("ext", "two")}),
    ],
    ids=["delivery", "when_busy", "origin_kind", "extension", "correlation"],
)
def test_a_request_id_retried_with_another_delivery_when_busy_or_origin_is_a_409(kit, first, retry):
    kit.conversation()
    kit.submit(request_id="r1", **first)
    with pytest.raises(HostError) as refused:
        kit.submit(request_id="r1", **retry)
    assert refused.value.message == "Request id was already used with different content"
    assert Submission.objects.count() == 1


def test_a_request_id_is_unique_per_conversation_only(kit):
    kit.conversation("a")
    kit.conversation("b")
    first = kit.submit("a", request_id="r1")
    other = kit.submit("b", request_id="r1")
    assert other.pk != first.pk and other.conversation_id == "b"
    assert Submission.objects.filter(request_id="r1").count() == 2


def test_a_retry_of_a_submission_admitted_before_archiving_returns_it(kit, owner):
    """The response was lost, then the conversation was archived: the retry still learns its
    submission was admitted, rather than 409 closed."""
    kit.conversation()
    first = kit.submit(request_id="r1")
    Conversation.objects.filter(pk="c1").update(archived=True)
    with transaction.atomic():
        again = services.submission_admit(
            conversation_id="c1", parts=text("hello"), origin=Origin.of_user(owner), request_id="r1"
        )
    assert (again.submission.pk, again.created) == (first.pk, False)


@pytest.mark.parametrize(
    "write",
    [
        lambda reader, at: services.submission_submit(
            principal=reader, conversation_id="c1", parts=text("hi")
        ),
        lambda reader, at: services.conversation_fork(
            principal=reader, conversation_id="c1", at=at, child_id="mine"
        ),
    ],
    ids=["submit", "fork"],
)
def test_the_submit_and_fork_services_refuse_a_reader_who_may_not_write(kit, member, write):
    """Not only the API views: the services check owner access themselves (spec 01)."""
    kit.conversation(sharing="users")
    at = kit.submit().entry.pk
    with pytest.raises(HostError) as refused:
        write(user_principal(member, "token"), at)
    assert (refused.value.cause, refused.value.status) == ("forbidden", 403)
    assert Submission.objects.count() == 1
    assert list(Conversation.objects.values_list("pk", flat=True)) == ["c1"]


def test_withdrawing_bumps_the_version_and_withdrawing_again_does_not(kit, owner):
    kit.conversation()
    submission = kit.submit()
    principal = user_principal(owner, "token")
    withdraw = {"principal": principal, "conversation_id": "c1", "submission_id": submission.pk}
    before = version()
    services.submission_withdraw(**withdraw)
    assert version() == before + 1
    services.submission_withdraw(**withdraw)
    assert version() == before + 1


# ── settling ─────────────────────────────────────────────────────────────────────────────────


def test_an_answered_outcome_with_a_reason_is_invalid(kit):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    answer = kit.answer(run)
    with pytest.raises(HostError) as refused:
        services.run_settle(
            run_id=run.pk, status="answered", answer_entry_id=answer.pk, reason="both"
        )
    assert (refused.value.cause, refused.value.message) == (
        "invalid",
        "An answered outcome names its answer entry",
    )
    assert Run.objects.get(pk=run.pk).status == "claimed"


def test_an_unanswered_reason_the_database_cannot_store_is_invalid(kit):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    with pytest.raises(HostError) as refused:
        services.run_settle(run_id=run.pk, status="unanswered", reason="gave\x00up")
    assert (refused.value.cause, list(refused.value.details)) == ("invalid", ["reason"])
    assert Run.objects.get(pk=run.pk).status == "claimed"


def test_a_settle_whose_run_moved_under_it_rolls_back_and_uses_no_sequence_number(kit, monkeypatch):
    """The run row's compare-and-set: when the run is no longer claimed as the settle writes
    it, everything the settle wrote rolls back; no settled sequence number is used up."""
    from conversations.services import settle

    kit.conversation()
    kit.submit()
    run = kit.claim()
    number = settle.settled_sequence_next

    def moved_meanwhile() -> int:
        Run.objects.filter(pk=run.pk).update(status="released")
        return number()

    monkeypatch.setattr(settle, "settled_sequence_next", moved_meanwhile)
    with pytest.raises(HostError) as refused:
        services.run_settle(run_id=run.pk, status="unanswered", reason="gave up")
    assert refused.value.cause == "conflict"
    assert Submission.objects.get().status == "claimed"
    monkeypatch.undo()
    settled = services.run_settle(run_id=run.pk, status="unanswered", reason="gave up")
    assert settled.run.settled_sequence == 1


# ── conversations ────────────────────────────────────────────────────────────────────────────


def test_creating_with_an_unknown_sharing_is_invalid_not_a_database_error(kit):
    with pytest.raises(HostError) as refused:
        kit.conversation(sharing="friends")
    assert (refused.value.cause, refused.value.message) == ("invalid", "Sharing is invalid")
    assert not Conversation.objects.exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [({"sharing": "friends"}, "Sharing is invalid"), ({"name": "n" * 201}, "Name is too long")],
)
def test_the_update_service_refuses_an_unknown_sharing_or_an_over_long_name(
    kit, owner, change, message
):
    kit.conversation(name="Plans")
    with pytest.raises(HostError) as refused:
        services.conversation_update(
            principal=user_principal(owner, "token"), conversation_id="c1", **change
        )
    assert (refused.value.cause, refused.value.message) == ("invalid", message)
    unchanged = Conversation.objects.get()
    assert (unchanged.name, unchanged.sharing) == ("Plans", "private")


def test_an_update_that_changes_nothing_does_not_bump_the_version(kit, owner):
    kit.conversation(name="Plans")
    before = version()
    services.conversation_update(
        principal=user_principal(owner, "token"),
        conversation_id="c1",
        name="Plans",
        sharing="private",
        archived=False,
    )
    assert version() == before


def test_a_fork_id_taken_by_an_admins_identical_fork_is_a_409_for_the_owner(kit, owner, staff):
    """The same parent and fork point are not enough: the fork must be the principal's own."""
    kit.conversation("parent")
    at = kit.submit("parent").entry.pk
    fork = {"conversation_id": "parent", "at": at, "child_id": "f"}
    services.conversation_fork(principal=user_principal(staff, "token"), **fork)
    with pytest.raises(HostError) as refused:
        services.conversation_fork(principal=user_principal(owner, "token"), **fork)
    assert (refused.value.cause, refused.value.message) == ("conflict", "Conversation id is taken")
    assert Conversation.objects.get(pk="f").owner == staff


def test_a_fork_is_private_and_keeps_the_parents_source_and_withdrawn_marks(kit, owner):
    kit.conversation("parent", sharing="public", source="slack")
    kit.submit("parent", say="kept")
    withdrawn = kit.submit("parent", say="taken back")
    services.submission_withdraw(
        principal=user_principal(owner, "token"),
        conversation_id="parent",
        submission_id=withdrawn.pk,
    )
    child = services.conversation_fork(
        principal=user_principal(owner, "token"),
        conversation_id="parent",
        at=withdrawn.entry.pk,
        child_id="child",
    ).conversation
    assert (child.sharing, child.source) == ("private", "slack")
    copies = Entry.objects.filter(conversation_id="child").order_by("pk")
    assert [(e.content[0]["text"], e.withdrawn) for e in copies] == [
        ("kept", False),
        ("taken back", True),
    ]


def test_retention_keeps_a_conversation_archived_exactly_retention_days_ago(
    kit, fake_clock, settings
):
    settings.RETENTION_DAYS = 30
    kit.conversation()
    Conversation.objects.filter(pk="c1").update(archived=True, archived_at=clock.now())
    fake_clock.advance(seconds=30 * 86400)
    assert services.conversations_retention_sweep() == (0, False)
    fake_clock.advance(seconds=1)
    assert services.conversations_retention_sweep() == (1, False)
    assert not Conversation.objects.exists()


def test_a_retention_page_deletes_the_longest_archived_first_and_says_more_remain(
    kit, fake_clock, settings
):
    settings.RETENTION_DAYS = 1
    for cid in ("newer", "older"):
        kit.conversation(cid)
    Conversation.objects.filter(pk="older").update(archived=True, archived_at=clock.now())
    fake_clock.advance(seconds=60)
    Conversation.objects.filter(pk="newer").update(archived=True, archived_at=clock.now())
    fake_clock.advance(seconds=2 * 86400)
    assert services.conversations_retention_sweep(limit=1) == (1, True)
    assert list(Conversation.objects.values_list("pk", flat=True)) == ["newer"]


@pytest.mark.parametrize(("name", "expected"), [(None, "Plans"), ("Mine", "Mine")])
def test_a_fork_takes_the_parents_name_unless_given_one(kit, owner, name, expected):
    kit.conversation("parent", name="Plans")
    at = kit.submit("parent").entry.pk
    child = services.conversation_fork(
        principal=user_principal(owner, "token"), conversation_id="parent", at=at, name=name
    ).conversation
    assert child.name == expected


# ── content checks ───────────────────────────────────────────────────────────────────────────


def test_entry_content_of_exactly_one_mebibyte_encoded_is_allowed():
    mib = 1024 * 1024
    content_size_check(mib, field="content")
    with pytest.raises(HostError) as refused:
        content_size_check(mib + 1, field="content")
    assert refused.value.message == "Entry content is too large"


def test_an_empty_list_of_parts_is_refused_for_a_submission_and_an_entry(kit):
    kit.conversation()
    with pytest.raises(HostError) as submission:
        services.submission_admit(
            conversation_id="c1", parts=[], origin=Origin.of_user(kit.default_owner)
        )
    kit.submit()
    run = kit.claim()
    with pytest.raises(HostError) as entry:
        services.entry_append(conversation_id="c1", run_id=run.pk, role="assistant", content=[])
    assert submission.value.details == {"parts": ["Must be a non-empty list of parts."]}
    assert entry.value.details == {"content": ["Must be a non-empty list of parts."]}
    assert Submission.objects.count() == 1 and not Entry.objects.filter(run=run).exists()
