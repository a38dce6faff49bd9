"""The operation state machine: every combination, in Python and in the database."""

from __future__ import annotations

import itertools

import pytest
from django.db import IntegrityError, transaction

from artifacts import services
from artifacts.models import (
    FollowupStatus,
    Operation,
    OperationStatus,
    ProjectionStatus,
    World,
)
from artifacts.state import operation_state_problem, request_attempts_problem
from core.errors import HostError
from tests.artifacts.helpers import head, op_context

STATUSES = OperationStatus.values
FOLLOWUPS = FollowupStatus.values
PROJECTIONS = ProjectionStatus.values
HEADS = ["", head(1)]
MESSAGES = ["", "why"]
REQUESTS = [[], ["r1"]]


def seed_valid(status, followup, projection, head, message, requests) -> bool:
    """The seed's `validArtifactOperationState`, restated literally as the test oracle."""
    if status == "running":
        return followup == "not_started" and not requests and not message and not head
    if status == "core_failed":
        return followup == "failed" and not requests and projection == "superseded" and not head
    if status == "core_materialization_pending":
        return (
            followup == "recovery_required"
            and not requests
            and projection == "active"
            and bool(head)
            and bool(message)
        )
    if status == "completed":
        return followup == "completed" and bool(head) and not message
    if not head:
        return False
    if followup == "completed":
        return False
    if followup in ("not_started", "running"):
        return not requests and not message
    return bool(message) and (followup != "superseded" or projection == "superseded")


ALL = list(itertools.product(STATUSES, FOLLOWUPS, PROJECTIONS, HEADS, MESSAGES, REQUESTS))


def test_the_combination_space_has_valid_and_invalid_states():
    valid = [c for c in ALL if seed_valid(*c)]
    assert len(ALL) == 720
    assert 0 < len(valid) < len(ALL)


@pytest.mark.parametrize("combination", ALL, ids=lambda c: "-".join(map(str, c)))
def test_the_python_check_accepts_exactly_the_seeds_valid_states(combination):
    status, followup, projection, head, message, requests = combination
    problem = operation_state_problem(
        status=status,
        followup_status=followup,
        projection_status=projection,
        head=head,
        message=message,
        completed_requests=requests,
    )
    assert (problem is None) == seed_valid(*combination), problem


@pytest.mark.django_db
def test_the_database_constraint_refuses_every_invalid_combination(world):
    World.objects.create(conversation=world)
    mismatches = []
    for index, combination in enumerate(ALL):
        status, followup, projection, bound, message, requests = combination
        row = Operation(
            id=f"op-{index}",
            world_id=world.pk,
            parent_head=head(0),
            preset_id="p",
            preset_revision="r",
            preset_scripts_enabled=False,
            status=status,
            followup_status=followup,
            projection_status=projection,
            head=bound,
            message=message,
            completed_requests=requests,
        )
        try:
            with transaction.atomic():
                row.save(force_insert=True)
            stored = True
        except IntegrityError:
            stored = False
        if stored != seed_valid(*combination):
            mismatches.append(combination)
    assert mismatches == []
    assert Operation.objects.count() == sum(seed_valid(*c) for c in ALL)


@pytest.mark.django_db
def test_the_database_refuses_an_unknown_projection_status(world):
    World.objects.create(conversation=world)
    with pytest.raises(IntegrityError), transaction.atomic():
        Operation.objects.create(
            id="op",
            world_id=world.pk,
            parent_head=head(0),
            preset_id="p",
            preset_revision="r",
            preset_scripts_enabled=False,
            projection_status="bogus",
        )


@pytest.mark.parametrize(
    ("field", "value"),
    [("head", "   "), ("message", "  ")],
)
def test_blank_heads_and_messages_count_as_absent(field, value):
    state = {
        "status": "core_materialization_pending",
        "followup_status": "recovery_required",
        "projection_status": "active",
        "head": head(1),
        "message": "waiting",
        "completed_requests": [],
    }
    assert operation_state_problem(**state) is None
    state[field] = value
    assert operation_state_problem(**state) is not None


@pytest.mark.parametrize(
    "attempts", [{"r": 0}, {"r": -1}, {"r": "1"}, {"r": True}, {" ": 1}, ["r"]]
)
def test_malformed_request_attempts_are_invalid(attempts):
    assert request_attempts_problem(attempts) is not None
    assert request_attempts_problem({"r": 1, "s": 3}) is None


@pytest.mark.django_db
def test_a_service_write_into_an_invalid_state_is_an_invariant_error_and_changes_nothing(world):
    # op-1 is running when op-2 begins on another head: op-1's projection is superseded.
    # Awaiting materialization requires an active projection, so that write is refused.
    services.operation_begin(context=op_context(operation_id="op-1", parent_head=head(0)))
    services.operation_begin(context=op_context(operation_id="op-2", parent_head=head(9)))
    before = Operation.objects.get(pk="op-1")

    with pytest.raises(HostError) as caught:
        services.operation_mark_core_materialization_pending(
            context=op_context(operation_id="op-1", parent_head=head(0)), head=head(1), message="m"
        )

    assert caught.value.status == 409
    assert caught.value.message == "Artifact operation state is invalid"
    after = Operation.objects.get(pk="op-1")
    assert (after.status, after.head, after.message) == (before.status, "", "")
