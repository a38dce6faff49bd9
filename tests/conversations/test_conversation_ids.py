"""One conversation-id rule (`conversations.models.conversation_id_valid`), matched whole: every
place that checks an id agrees, and a trailing newline ("x\\n", which `^…$` lets through) is
refused everywhere; a service refuses an id that cannot exist before any query."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from conversations import selectors, services
from conversations.models import conversation_id_valid, conversation_id_validator
from core.auth import user_principal
from core.errors import HostError
from extensions_host.sdk import StateError
from extensions_host.services.documents import check_conversation_id
from extensions_host.surfaces.services.common import conversation_exists

GOOD = ["c", "A-b_9", "a" * 64]
BAD = ["x\n", "", "a" * 65, "has space", "tab\t", "ümlaut", "a\x00b", "\nx"]


@pytest.mark.parametrize("value", GOOD)
def test_a_well_formed_id_is_valid(value):
    assert conversation_id_valid(value)
    conversation_id_validator(value)  # no error


@pytest.mark.parametrize("value", BAD)
def test_a_malformed_id_is_invalid_for_the_check_and_the_model_validator(value):
    assert not conversation_id_valid(value)
    with pytest.raises(ValidationError):
        conversation_id_validator(value)


@pytest.mark.parametrize("value", [None, 5, b"c", ["c"]])
def test_a_non_string_is_never_an_id(value):
    assert not conversation_id_valid(value)


def test_a_trailing_newline_is_refused_by_the_create_input_not_only_the_service(api, owner):
    response = api(owner).post("/v1/conversations", {"id": "x\n"}, format="json")
    assert response.status_code == 400
    # the serializer's validator (the model's own) answers, before the service is reached
    assert response.json()["error"]["details"]["id"] == ["Use 1-64 of A-Z a-z 0-9 _ -."]


def test_a_document_access_refuses_a_trailing_newline(db):
    assert check_conversation_id("x") == "x"
    with pytest.raises(StateError, match="Conversation id is invalid"):
        check_conversation_id("x\n")


def test_every_reader_finds_nothing_for_a_trailing_newline(kit, owner):
    kit.conversation("x")
    assert conversation_exists("x")
    assert not conversation_exists("x\n")
    with pytest.raises(HostError) as raised:
        selectors.conversation_get(
            principal=user_principal(owner, "session"), conversation_id="x\n"
        )
    assert raised.value.cause == "not_found"


@pytest.mark.parametrize("value", ["x\n", "a\x00b"])
def test_a_conversation_scoped_claim_of_an_impossible_id_is_not_found_without_a_query(
    db, django_assert_num_queries, value
):
    with django_assert_num_queries(0), pytest.raises(HostError) as raised:
        services.run_claim(conversation_id=value)
    assert (raised.value.cause, raised.value.message) == ("not_found", "Conversation not found")


@pytest.mark.parametrize("submission_id", [0, 2**63])
def test_withdrawing_an_impossible_submission_id_is_not_found_in_the_service(
    kit, owner, submission_id
):
    kit.conversation("c1")
    with pytest.raises(HostError) as raised:
        services.submission_withdraw(
            principal=user_principal(owner, "session"),
            conversation_id="c1",
            submission_id=submission_id,
        )
    assert (raised.value.cause, raised.value.message) == ("not_found", "Submission not found")
