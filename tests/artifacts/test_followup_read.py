"""`selectors.followup_read`: admins and the service principal read any operation's summary;
anyone else, a `runtime` token included (this read is not a runtime endpoint of spec 07), needs
read access to the operation's conversation, and finds a missing operation and a hidden one
alike."""

from __future__ import annotations

import pytest

from artifacts import selectors, services
from artifacts.selectors import MSG_OPERATION_NOT_FOUND
from core.auth import ANONYMOUS, service_principal, user_principal
from core.errors import HostError
from core.models import TokenScope
from tests.artifacts.helpers import make_world, op_context

pytestmark = pytest.mark.django_db


@pytest.fixture
def private_operation(owner):
    make_world(owner, "world-1")
    services.operation_begin(context=op_context("world-1", "op-1"))
    return "op-1"


def not_found(principal, operation_id: str) -> bool:
    with pytest.raises(HostError) as raised:
        selectors.followup_read(principal=principal, operation_id=operation_id)
    return (raised.value.cause, raised.value.message) == ("not_found", MSG_OPERATION_NOT_FOUND)


def test_the_owner_and_the_service_principal_read_the_summary(private_operation, owner):
    as_owner = selectors.followup_read(
        principal=user_principal(owner, "session"), operation_id=private_operation
    )
    assert as_owner.operation_id == "op-1"
    as_service = selectors.followup_read(
        principal=service_principal(), operation_id=private_operation
    )
    assert as_service == as_owner


def test_a_runtime_token_does_not_read_past_sharing(private_operation, outsider):
    # spec 07: only the runtime endpoints ignore sharing; this read is not one of them
    runtime = user_principal(outsider, "token", scope=TokenScope.RUNTIME)
    assert runtime.is_runtime and not runtime.admin
    assert not_found(runtime, private_operation)


def test_an_unreadable_world_hides_its_operation_like_a_missing_one(private_operation, outsider):
    assert not_found(user_principal(outsider, "session"), private_operation)
    assert not_found(ANONYMOUS, private_operation)  # the API view turns this into a 401
    assert not_found(user_principal(outsider, "session"), "missing")


@pytest.mark.parametrize("operation_id", ["a\x00b", "x" * 256])
def test_an_impossible_id_is_not_found_without_a_query(
    owner, django_assert_num_queries, operation_id
):
    with django_assert_num_queries(0):
        assert not_found(user_principal(owner, "session"), operation_id)
