"""Deleting a user: a required transfer target, ownership moved, tokens revoked, the user
removed, then `user_deleted` once; plain cascade deletion disabled."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.db.models import ProtectedError
from rest_framework.test import APIClient

from conversations.models import Conversation
from core.auth import service_user
from core.errors import HostError
from core.models import ApiToken, AuditEntry, LifecycleEvent
from core.services import token_create
from extensions_host.contributions.services.users import user_delete
from extensions_host.sdk import Extension

User = get_user_model()


def test_deleting_a_user_transfers_revokes_removes_then_records_user_deleted_once(
    owner, member, staff, conversation
):
    conversation("c1", who=owner)
    conversation("c2", who=owner, sharing="public")
    conversation("m1", who=member)
    _, raw = token_create(user=owner, name="cli", scope="write", expires_at=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/v1/conversations").status_code == 200
    result = user_delete(user_id=owner.pk, transfer_to_id=member.pk, actor="staff")
    assert result == {
        "user": "owner",
        "transfer_to": "member",
        "conversations": 2,
        "tokens_revoked": 1,
    }
    assert set(Conversation.objects.filter(owner=member).values_list("pk", flat=True)) == {
        "c1",
        "c2",
        "m1",
    }
    assert not User.objects.filter(username="owner").exists()
    assert not ApiToken.objects.filter(user_id=owner.pk).exists()
    assert client.get("/v1/conversations").status_code == 401  # the token is dead
    [event] = LifecycleEvent.objects.filter(kind="user_deleted")
    assert event.payload == {"user": "owner", "transfer_to": "member"}
    audit = AuditEntry.objects.get(action="user_deleted")
    assert (audit.actor, audit.target) == ("staff", "owner")


@pytest.mark.skipif(
    not apps.is_installed("extensions_host.background"), reason="needs the background app"
)
def test_user_deleted_is_delivered_once_to_a_subscribed_extension(install, owner, member):
    from extensions_host.background.services.lifecycle import lifecycle_deliver, lifecycle_fanout

    received = []
    ext = Extension(id="directory", version="1", grants={"lifecycle"})
    ext.on_lifecycle("user_deleted")(lambda ctx, event: received.append(dict(event.data)))
    install(ext)
    user_delete(user_id=owner.pk, transfer_to_id=member.pk, actor="staff")
    for _ in range(3):  # the sweep may run many times: the event is delivered once
        lifecycle_fanout()
        lifecycle_deliver(extension_id="directory")
    assert received == [{"user": "owner", "transfer_to": "member"}]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (None, "A user to transfer ownership to is required"),
        ("self", "Ownership cannot be transferred to the user being deleted"),
        ("inactive", "Ownership can only be transferred to an active user"),
    ],
)
def test_a_transfer_target_is_required_and_valid(owner, make_user, conversation, target, message):
    conversation("c1")
    inactive = make_user("gone", is_active=False)
    target_id = {None: None, "self": owner.pk, "inactive": inactive.pk}[target]
    with pytest.raises(HostError, match=message):
        user_delete(user_id=owner.pk, transfer_to_id=target_id, actor="staff")
    assert User.objects.filter(pk=owner.pk).exists()
    assert Conversation.objects.get(pk="c1").owner_id == owner.pk
    assert not LifecycleEvent.objects.filter(kind="user_deleted").exists()


def test_the_service_user_cannot_be_deleted(member, conversation):
    service = service_user()
    conversation("s1", who=service)

    with pytest.raises(HostError) as refused:
        user_delete(user_id=service.pk, transfer_to_id=member.pk, actor="staff")

    assert (refused.value.category, refused.value.cause, refused.value.message) == (
        "contract",
        "conflict",
        "The service user cannot be deleted",
    )
    assert refused.value.status == 409
    assert User.objects.filter(pk=service.pk).exists()
    assert Conversation.objects.get(pk="s1").owner_id == service.pk
    assert not LifecycleEvent.objects.filter(kind="user_deleted").exists()
    assert not AuditEntry.objects.filter(action="user_deleted").exists()


def test_plain_cascade_deletion_is_refused(owner, conversation):
    conversation("c1")
    with pytest.raises(ProtectedError):
        owner.delete()


def test_the_admin_deletes_a_user_only_through_the_transfer_form(
    client, staff, owner, member, conversation
):
    conversation("c1")
    client.force_login(staff)
    url = "/admin/auth/user/"
    # the plain delete view is gone
    assert client.get(f"{url}{owner.pk}/delete/").status_code == 403
    page = client.post(url, {"action": "delete_with_transfer", "_selected_action": [owner.pk]})
    assert page.status_code == 200
    assert b"transfer_to" in page.content
    assert User.objects.filter(pk=owner.pk).exists()
    no_target = client.post(
        url,
        {"action": "delete_with_transfer", "_selected_action": [owner.pk], "confirm": "yes"},
    )
    assert no_target.status_code == 200  # the form again, with its error
    assert User.objects.filter(pk=owner.pk).exists()
    done = client.post(
        url,
        {
            "action": "delete_with_transfer",
            "_selected_action": [owner.pk],
            "confirm": "yes",
            "transfer_to": member.pk,
        },
        follow=True,
    )
    assert done.status_code == 200
    assert not User.objects.filter(pk=owner.pk).exists()
    assert Conversation.objects.get(pk="c1").owner_id == member.pk
    assert AuditEntry.objects.filter(action="user_deleted", actor="staff").count() == 1
